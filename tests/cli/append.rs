//! `convert ... --append`: a growing folder of Parquet files (a Hive table gaining a
//! partition, a file replaced, a file removed) converted a generation at a time; after
//! every step the live shards hold exactly the records of one full conversion, the
//! shards that held no changed file stay as they were, and a killed or concurrent
//! append publishes nothing half-done.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::convert::write_table;
use crate::{read_manifest, run, s, scratch, wait_for_failpoint};

/// Every record payload the manifest `{prefix}.manifest.json` in `dir` lists, in its
/// order.
fn records_of(dir: &Path, prefix: &str) -> Vec<Vec<u8>> {
    let m = read_manifest(dir, prefix);
    let mut out = Vec::new();
    for shard in m["shards"].as_array().unwrap() {
        let bytes = fs::read(dir.join(shard["file"].as_str().unwrap())).unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            out.push(bytes[at + 12..at + 12 + len].to_vec());
            at += 16 + len;
        }
    }
    out
}

/// Every record payload the manifest in `dir` lists, sorted (a multiset).
pub(crate) fn payloads(dir: &Path) -> Vec<Vec<u8>> {
    let mut out = records_of(dir, "data");
    out.sort();
    out
}

/// Each shard file the manifest in `dir` lists, with its bytes.
pub(crate) fn listed(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let m = read_manifest(dir, "data");
    (m["shards"].as_array().unwrap().iter())
        .map(|sh| {
            let f = sh["file"].as_str().unwrap().to_owned();
            let bytes = fs::read(dir.join(&f)).unwrap();
            (f, bytes)
        })
        .collect()
}

const SHARDS: [&str; 4] = ["--max-records-per-shard", "250", "--threads", "2"];

fn convert(table: &Path, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", "parquet", s(table), "-o", s(out)];
    args.extend_from_slice(&SHARDS);
    args.extend_from_slice(extra);
    run(args)
}

/// The live records of `out` equal a full conversion of `table` as it is now, and
/// `verify` passes.
fn same_as_full(table: &Path, out: &Path, name: &str) {
    let full = scratch(&format!("append-full-{name}"));
    let (code, _, err) = convert(table, &full, &["--overwrite"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(payloads(out), payloads(&full), "{name}: the live records");
    let m = read_manifest(out, "data");
    let f = read_manifest(&full, "data");
    assert_eq!(m["records"], f["records"], "{name}");
    let (code, stdout, err) = run(["verify", s(out)]);
    assert_eq!(code, 0, "{name}: {stdout}{err}");
}

/// A Hive-style folder: `day=1` .. `day=N` partitions of 300 rows each (3 row groups),
/// converted at once (an input is told by its identity, not by the clock).
fn table(name: &str, days: usize) -> PathBuf {
    let dir = scratch(name);
    for d in 1..=days {
        add_day(&dir, d, d * 1000);
    }
    dir
}

fn add_day(dir: &Path, day: usize, first: usize) {
    let part = dir.join(format!("day={day}"));
    fs::create_dir_all(&part).unwrap();
    write_table(&part.join("part-0.parquet"), 300, first, 100);
}

#[test]
fn a_growing_folder_appends_what_changed_and_keeps_one_snapshot() {
    let t = table("append-hive", 3);
    let out = scratch("append-hive-out");
    let (code, _, err) = convert(&t, &out, &["--append"]);
    assert_eq!(code, 0, "an absent output makes generation 0: {err}");
    let g0 = read_manifest(&out, "data");
    assert_eq!(g0["manifest_version"], 1, "a plain run's manifest");
    assert!(g0.get("generations").is_none());
    let before = listed(&out);
    assert_eq!(before.len(), 4); // 900 records, 250 a shard

    // A new partition: only it is read, into generation 1.
    add_day(&t, 4, 4000);
    let (code, stdout, err) = convert(&t, &out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["up_to_date"], false);
    assert_eq!(summary["generation"], 1);
    assert_eq!(summary["retired"], 0);
    assert_eq!(summary["records"], 300, "only the new partition's rows");
    let g1 = read_manifest(&out, "data");
    assert_eq!(g1["manifest_version"], 2);
    let now = listed(&out);
    for (f, bytes) in &before {
        assert_eq!(now.get(f), Some(bytes), "{f} stays as it was");
    }
    let new: Vec<&String> = now.keys().filter(|f| !before.contains_key(*f)).collect();
    assert_eq!(
        new,
        [
            "data-g00001-00000-of-00002.tfrecord",
            "data-g00001-00001-of-00002.tfrecord"
        ]
    );
    let generations = g1["generations"].as_array().unwrap();
    assert_eq!(generations.len(), 2);
    assert_eq!(generations[1]["records"], 300);
    assert!(out.join("data.manifest-g00001.json").exists(), "pinned");
    same_as_full(&t, &out, "new partition");

    // Nothing new: up to date, nothing written; twice is the same.
    for _ in 0..2 {
        let (code, stdout, err) = convert(&t, &out, &["--append"]);
        assert_eq!(code, 0, "{err}");
        assert!(stdout.contains("up to date"), "{stdout}");
        assert_eq!(read_manifest(&out, "data"), g1, "nothing written");
    }
    let (_, stdout, _) = convert(&t, &out, &["--append", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["up_to_date"], true);
    assert_eq!(summary["generation"], 1);

    // A replaced file (day=2, rows 300..600 of the records): the shards holding its
    // records go, with the records they held of day=1 and day=3 read again; the others
    // stay.
    write_table(&t.join("day=2/part-0.parquet"), 200, 77_000, 100);
    let (code, stdout, err) = convert(&t, &out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["generation"], 2);
    // Shards 0 [0,250) day1, 1 [250,500): day1+day2, 2 [500,750) day2+day3, 3 day3.
    assert_eq!(summary["retired"], 2, "{summary}");
    let after = listed(&out);
    for f in [
        "data-00000-of-00004.tfrecord",
        "data-00003-of-00004.tfrecord",
    ] {
        assert_eq!(after.get(f), before.get(f), "{f} held no record of day=2");
    }
    for f in [
        "data-00001-of-00004.tfrecord",
        "data-00002-of-00004.tfrecord",
    ] {
        assert!(
            !after.contains_key(f) && !out.join(f).exists(),
            "{f} retired"
        );
    }
    let g2 = read_manifest(&out, "data");
    let retired = &g2["generations"][2]["retired"];
    assert_eq!(
        retired,
        &serde_json::json!([
            "data-00001-of-00004.tfrecord",
            "data-00002-of-00004.tfrecord"
        ])
    );
    // Day 1's [250, 300) + day 2's new 200 + day 3's [0, 150).
    assert_eq!(g2["generations"][2]["records"], 400);
    // The pinned manifest of generation 1 listed a retired shard: gone with it.
    assert!(!out.join("data.manifest-g00001.json").exists());
    assert!(out.join("data.manifest-g00002.json").exists());
    same_as_full(&t, &out, "replaced file");

    // A removed partition.
    fs::remove_dir_all(t.join("day=4")).unwrap();
    let (code, _, err) = convert(&t, &out, &["--append"]);
    assert_eq!(code, 0, "{err}");
    same_as_full(&t, &out, "removed partition");
    // No file of the prefix is left unlisted (retired shards went).
    let m = read_manifest(&out, "data");
    for entry in fs::read_dir(&out).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".tfrecord") {
            assert!(
                m["shards"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s["file"] == name),
                "{name} is listed"
            );
        }
    }
}

/// The sources of a shard re-converted from the middle of a file, across a row group
/// read in part and one read whole, name the file's rows it holds: a later change to
/// that file retires exactly what holds them.
#[test]
fn records_read_again_from_inside_a_file_keep_their_rows() {
    let t = table("append-inside", 5);
    let out = scratch("append-inside-out");
    let (code, _, err) = convert(&t, &out, &[]);
    assert_eq!(code, 0, "{err}");
    // Shard 3 holds day 3's [150, 300) (its second row group in part, its third whole)
    // and day 4's [0, 100): day 4 replaced, it is read again.
    write_table(&t.join("day=4/part-0.parquet"), 300, 44_000, 100);
    let (code, _, err) = convert(&t, &out, &["--append"]);
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&out, "data");
    let day3: Vec<&serde_json::Value> = (m["shards"].as_array().unwrap().iter())
        .filter(|sh| sh["generation"] == 1)
        .flat_map(|sh| sh["sources"].as_array().unwrap())
        .filter(|src| src["input"].as_str().unwrap().contains("day=3"))
        .map(|src| &src["rows"])
        .collect();
    assert_eq!(day3, [&serde_json::json!([150, 300])], "{m}");
    same_as_full(&t, &out, "inside: day 4 replaced");
    // Day 3 replaced: every shard holding its rows goes, and none of them twice.
    write_table(&t.join("day=3/part-0.parquet"), 300, 33_000, 100);
    let (code, _, err) = convert(&t, &out, &["--append"]);
    assert_eq!(code, 0, "{err}");
    same_as_full(&t, &out, "inside: day 3 replaced");
}

/// `convert --append --num-workers N --worker-index I` for each I, then `finalize`.
fn append_with_workers(t: &Path, out: &Path, n: u64) -> Vec<String> {
    let mut said = Vec::new();
    for i in 0..n {
        let (n, i) = (n.to_string(), i.to_string());
        let worker = ["--append", "--num-workers", &n, "--worker-index", &i];
        let (code, stdout, err) = convert(t, out, &worker);
        assert_eq!(code, 0, "worker {i}: {err}");
        said.push(format!("{stdout}{err}"));
    }
    said
}

/// Workers of an append plan the same generation; `finalize` publishes it as one
/// machine's append would: the same live records in the same order, the same shards
/// retired. Workers after another run published refuse nothing, but their `finalize`
/// does, and publishes nothing.
#[test]
fn workers_append_one_generation_that_finalize_publishes() {
    let t = table("append-workers", 4);
    let one = scratch("append-workers-one");
    let many = scratch("append-workers-many");
    for out in [&one, &many] {
        let (code, _, err) = convert(&t, out, &[]);
        assert_eq!(code, 0, "{err}");
    }
    add_day(&t, 5, 5000);
    write_table(&t.join("day=2/part-0.parquet"), 200, 22_000, 100);
    let (code, _, err) = convert(&t, &one, &["--append"]);
    assert_eq!(code, 0, "{err}");
    append_with_workers(&t, &many, 2);
    let before = read_manifest(&many, "data");
    assert_eq!(before["manifest_version"], 1, "workers publish nothing");
    // A finalize killed at any point leaves the set as it was; the next completes it.
    for failpoint in ["finalize:planned", "publish:moved", "publish:pinned"] {
        let status = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
            .args(["finalize", s(&many)])
            .env("TFSHARD_FAILPOINTS", format!("{failpoint}=exit"))
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(137), "{failpoint}");
        assert_eq!(
            read_manifest(&many, "data"),
            before,
            "{failpoint}: still live"
        );
        let (code, stdout, err) = run(["verify", s(&many)]);
        assert!(
            code == 0 || stdout.contains("unlisted"),
            "{failpoint}: {stdout}{err}"
        );
    }
    let (code, stdout, err) = run(["finalize", s(&many), "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["generation"], 1, "{report}");
    assert_eq!(report["workers"], 2);
    let (a, b) = (read_manifest(&one, "data"), read_manifest(&many, "data"));
    assert_eq!(
        report["retired"],
        a["generations"][1]["retired"].as_array().unwrap().len()
    );
    assert_eq!(
        records_of(&many, "data"),
        records_of(&one, "data"),
        "records in order"
    );
    for key in ["records", "retired"] {
        assert_eq!(a["generations"][1][key], b["generations"][1][key], "{key}");
    }
    assert_eq!(a["inputs"], b["inputs"]);
    assert!(many.join("data.manifest-g00001.json").exists(), "pinned");
    assert!(!many.join(".data.tfshard-parts").exists(), "parts gone");
    assert!(!many.join(".data.tfshard-append").exists(), "claim gone");
    same_as_full(&t, &many, "workers");

    // Nothing new: each worker says so and writes nothing; finalize finds the set.
    for said in append_with_workers(&t, &many, 2) {
        assert!(said.contains("up to date"), "{said}");
    }
    let (code, _, err) = run(["finalize", s(&many)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read_manifest(&many, "data"), b, "nothing written");

    // Another run publishes after the workers planned: finalize refuses their parts.
    add_day(&t, 6, 6000);
    append_with_workers(&t, &many, 2);
    let (code, _, err) = convert(&t, &many, &["--append"]);
    assert_eq!(code, 0, "{err}");
    let live = read_manifest(&many, "data");
    let (code, _, err) = run(["finalize", s(&many)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("run the workers again"), "{err}");
    assert_eq!(read_manifest(&many, "data"), live, "nothing published");
    same_as_full(&t, &many, "workers refused");
}

/// `convert images` of `dir` into `out` (2 records a shard), with `extra`.
fn convert_images(dir: &Path, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", "images", s(dir), "-o", s(out)];
    args.extend_from_slice(&["--max-records-per-shard", "2"]);
    args.extend_from_slice(extra);
    run(args)
}

/// An image folder's sub-folders are its inputs: a folder that gained images after
/// its last one, or a new one, is read alone; one whose images changed (replaced,
/// removed) retires the shards holding its records. After each step the live records
/// equal a full conversion.
#[test]
fn an_image_folder_appends_its_new_images() {
    let dir = crate::copy_tree(&crate::root().join("testdata/images"), "append-images");
    let out = scratch("append-images-out");
    let full = scratch("append-images-full");
    let same_as_full = |step: &str| {
        let (code, _, err) = convert_images(&dir, &full, &["--overwrite"]);
        assert_eq!(code, 0, "{err}");
        let (a, b) = (records_of(&out, "data"), records_of(&full, "data"));
        let sorted = |mut v: Vec<Vec<u8>>| {
            v.sort();
            v
        };
        assert_eq!(sorted(a), sorted(b), "{step}: the live records");
        let (code, stdout, err) = run(["verify", s(&out)]);
        assert_eq!(code, 0, "{step}: {stdout}{err}");
    };
    let (code, _, err) = convert_images(&dir, &out, &[]);
    assert_eq!(code, 0, "{err}");
    let before = listed(&out);
    // dogs/ gains an image after its last (G.JPEG, d.gif, e.bmp, f-really-png.jpg);
    // zebras/, empty, gains its first.
    let png = dir.join("cats/nested/deep/b.png");
    fs::copy(&png, dir.join("dogs/h.png")).unwrap();
    fs::copy(&png, dir.join("zebras/z.png")).unwrap();
    let (code, stdout, err) = convert_images(&dir, &out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["records"], 2, "only the new images: {summary}");
    assert_eq!(summary["retired"], 0, "{summary}");
    let now = listed(&out);
    for (f, bytes) in &before {
        assert_eq!(now.get(f), Some(bytes), "{f} stays as it was");
    }
    same_as_full("new images");
    let (code, stdout, _) = convert_images(&dir, &out, &["--append"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("up to date"), "{stdout}");

    // An image replaced, one removed: their folders' shards go.
    fs::copy(dir.join("dogs/e.bmp"), dir.join("cats/a.jpg")).unwrap();
    let (code, stdout, err) = convert_images(&dir, &out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(summary["retired"].as_u64().unwrap() > 0, "{summary}");
    same_as_full("replaced image");
    fs::remove_file(dir.join("dogs/d.gif")).unwrap();
    let (code, _, err) = convert_images(&dir, &out, &["--append"]);
    assert_eq!(code, 0, "{err}");
    same_as_full("removed image");

    // A new class folder sorting first renumbers every label: every folder changed.
    fs::create_dir(dir.join("ants")).unwrap();
    fs::copy(&png, dir.join("ants/x.png")).unwrap();
    let (code, stdout, err) = convert_images(&dir, &out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = read_manifest(&out, "data");
    let last = m["generations"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        summary["records"], m["records"],
        "all read again: {summary}"
    );
    assert!(!last["retired"].as_array().unwrap().is_empty());
    same_as_full("new class");
}

#[test]
fn appends_refuse_what_they_cannot_keep() {
    let t = table("append-usage", 1);
    let out = scratch("append-usage-out");
    let (code, _, err) = convert(&t, &out, &[]);
    assert_eq!(code, 0, "{err}");
    for (extra, needle) in [
        (&["--append", "--overwrite"][..], "give one"),
        (
            &["--append", "--split", "train=0.8,test=0.2"],
            "--split-key",
        ),
        (&["--append", "--tfds", "ds"], "TFDS"),
    ] {
        let (code, _, err) = convert(&t, &out, extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // Options that change the records must be the set's; the shard size may change.
    for (extra, needle) in [
        (&["--append", "--compression", "gzip"][..], "compression"),
        (&["--append", "--columns", "id,y"], "columns"),
        (&["--append", "--shuffle"], "shuffle"),
    ] {
        let (code, _, err) = convert(&t, &out, extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(
            err.contains(needle) && err.contains("--overwrite"),
            "{extra:?}: {err}"
        );
    }
    let (code, stdout, err) = convert(&t, &out, &["--append", "--target-shard-size", "1MiB"]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("up to date"), "{stdout}");
    // Shards but no manifest: there is no set to append to.
    fs::remove_file(out.join("data.manifest.json")).unwrap();
    let (code, _, err) = convert(&t, &out, &["--append"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--overwrite"), "{err}");
}

/// A manifest whose generations do not add up (edited by hand) is bad input: exit 1
/// naming the key, nothing published.
#[test]
fn a_manifest_edited_by_hand_stops_an_append() {
    let t = table("append-edited", 2);
    let out = scratch("append-edited-out");
    assert_eq!(convert(&t, &out, &[]).0, 0);
    add_day(&t, 3, 3000);
    assert_eq!(convert(&t, &out, &["--append"]).0, 0);
    let path = out.join("data.manifest.json");
    let mut m = read_manifest(&out, "data");
    let first = m["shards"][0].clone();
    m["shards"].as_array_mut().unwrap().push(first);
    fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    add_day(&t, 4, 4000);
    let (code, _, err) = convert(&t, &out, &["--append"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("listed twice"), "{err}");
    assert!(err.contains("data.manifest.json"), "{err}");
    assert_eq!(read_manifest(&out, "data"), m, "nothing published");
    let (code, _, err) = run(["verify", s(&out)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("listed twice"), "{err}");
}

/// `verify` checks each shard's generation and `sources` against the manifest's
/// `inputs`; `verify --deep` also checks the inputs that can still be read against
/// what the manifest says of them.
#[test]
fn verify_checks_sources_and_generations() {
    let t = table("append-verify", 3);
    let out = scratch("append-verify-out");
    assert_eq!(convert(&t, &out, &[]).0, 0);
    add_day(&t, 4, 4000);
    assert_eq!(convert(&t, &out, &["--append"]).0, 0);
    let (code, stdout, err) = run(["verify", "--deep", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    let path = out.join("data.manifest.json");
    let good = read_manifest(&out, "data");
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 5] = [
        ("which inputs does not list", |m| {
            m["shards"][0]["sources"][0]["input"] = "elsewhere.parquet".into()
        }),
        ("which has 300 rows", |m| {
            m["shards"][0]["sources"][0]["rows"] = serde_json::json!([0, 301])
        }),
        ("both hold rows from", |m| {
            m["shards"][1]["sources"][0]["rows"] = serde_json::json!([200, 300])
        }),
        ("its sources name", |m| {
            m["shards"][0]["sources"][0]["rows"] = serde_json::json!([0, 10])
        }),
        ("the manifest gives it generation 1", |m| {
            m["shards"][0]["generation"] = 1.into()
        }),
    ];
    for (needle, edit) in edits {
        let mut m = good.clone();
        edit(&mut m);
        if needle.contains("generation 1") {
            // (Generation 1 wrote more shards than it has live: still adds up.)
            m["generations"][1]["shards"] = 9.into();
        }
        fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        let (code, stdout, err) = run(["verify", s(&out)]);
        assert_eq!(code, 1, "{needle}: {stdout}{err}");
        assert!(
            format!("{stdout}{err}").contains(needle),
            "{needle}: {stdout}{err}"
        );
    }
    fs::write(&path, serde_json::to_vec(&good).unwrap()).unwrap();
    // An input replaced since: --deep names it; the set is fine as shards.
    write_table(&t.join("day=2/part-0.parquet"), 200, 22_000, 100);
    let (code, stdout, err) = run(["verify", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    let (code, stdout, err) = run(["verify", "--deep", "--json", s(&out)]);
    assert_eq!(code, 1, "{stdout}{err}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report}");
    assert_eq!(problems[0]["kind"], "source_mismatch");
    assert!(
        problems[0]["problem"].as_str().unwrap().contains("day=2"),
        "{report}"
    );
    // After an append the set is as the inputs are; an input gone is not a problem.
    assert_eq!(convert(&t, &out, &["--append"]).0, 0);
    let (code, stdout, err) = run(["verify", "--deep", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    fs::remove_dir_all(t.join("day=4")).unwrap();
    let (code, stdout, err) = run(["verify", "--deep", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
}

/// Writes a set's shard files and its manifest into `out`.
fn restore(out: &Path, shards: &BTreeMap<String, Vec<u8>>, manifest: &serde_json::Value) {
    for (f, bytes) in shards {
        fs::write(out.join(f), bytes).unwrap();
    }
    let json = serde_json::to_vec_pretty(manifest).unwrap();
    fs::write(out.join("data.manifest.json"), json).unwrap();
}

/// Killed at each step of its publish, an append leaves the previous set live (or, past
/// the manifest, the new one); a rerun publishes the same generation as an append that
/// was never killed.
#[test]
fn a_killed_append_leaves_a_live_set_and_a_rerun_completes_it() {
    let t = table("append-killed", 3);
    let reference = scratch("append-killed-ref");
    assert_eq!(convert(&t, &reference, &[]).0, 0);
    let base = listed(&reference);
    let base_manifest = read_manifest(&reference, "data");
    add_day(&t, 4, 4000);
    assert_eq!(convert(&t, &reference, &["--append"]).0, 0);
    let want = listed(&reference);
    for point in [
        "convert:planned",
        "convert:written",
        "publish:placed",
        "publish:pinned",
        "publish:published",
    ] {
        let out = scratch(&format!("append-killed-{}", point.replace(':', "-")));
        restore(&out, &base, &base_manifest);
        let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out), "--append"];
        args.extend_from_slice(&SHARDS);
        let code = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
            .args(&args)
            .env("TFSHARD_FAILPOINTS", format!("{point}=exit"))
            .status()
            .unwrap()
            .code();
        assert_eq!(code, Some(137), "{point}");
        // A live set: the old one, or (killed after its manifest) the new one.
        let m = read_manifest(&out, "data");
        let published = point == "publish:published";
        assert_eq!(m["generations"].is_array(), published, "{point}");
        for shard in m["shards"].as_array().unwrap() {
            assert!(
                out.join(shard["file"].as_str().unwrap()).exists(),
                "{point}"
            );
        }
        let (code, _, err) = run(args.iter().copied());
        assert_eq!(code, 0, "{point}: {err}");
        assert_eq!(listed(&out), want, "{point}: the same generation");
        let (code, stdout, err) = run(["verify", s(&out)]);
        assert_eq!(code, 0, "{point}: {stdout}{err}");
    }
}

/// A second append while one publishes exits 1 and touches nothing.
#[test]
fn two_appends_at_once_one_publishes() {
    let t = table("append-race", 2);
    let out = scratch("append-race-out");
    assert_eq!(convert(&t, &out, &[]).0, 0);
    add_day(&t, 3, 3000);
    let gate = scratch("append-race-gate").join("go");
    let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out), "--append"];
    args.extend_from_slice(&SHARDS);
    let mut first = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(&args)
        .env(
            "TFSHARD_FAILPOINTS",
            format!("convert:written=wait:{}", gate.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_failpoint(&mut first, &gate, "the first append wrote its shards");
    let (code, _, err) = run(args.iter().copied());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another run is publishing to this output"),
        "{err}"
    );
    fs::write(&gate, "").unwrap();
    let done = first.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    same_as_full(&t, &out, "race");
}

/// `convert delta --append`, version by version, through an append, a delete that
/// rewrites files, a schema-merging append (every generation retired, the snapshot
/// converted again) and an append after a checkpoint; and an overwrite. After each, the
/// live records are a full conversion's of that version.
#[test]
fn a_delta_table_appends_version_by_version() {
    let Some((dir, _)) = crate::delta::tables() else {
        eprintln!("skipped: no deltalake venv (run scripts/delta_venv.sh)");
        return;
    };
    let delta = |table: &Path, out: &Path, version: u64, extra: &[&str]| {
        let v = version.to_string();
        let mut args = vec!["convert", "delta", s(table), "-o", s(out), "--version", &v];
        args.extend_from_slice(&["--max-records-per-shard", "16"]);
        args.extend_from_slice(extra);
        let (code, stdout, err) = run(args);
        assert_eq!(code, 0, "version {version}: {err}");
        stdout
    };
    for (table, versions) in [("events", 5u64), ("overwritten", 2), ("compacted", 4)] {
        let path = dir.join(table);
        let out = scratch(&format!("append-delta-{table}"));
        delta(&path, &out, 0, &[]);
        for v in 1..versions {
            let before = listed(&out);
            let stdout = delta(&path, &out, v, &["--append", "--json"]);
            let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(summary["up_to_date"], false, "{table} v{v}");
            assert_eq!(summary["table"]["version"], v);
            let full = scratch(&format!("append-delta-{table}-full"));
            delta(&path, &full, v, &["--overwrite"]);
            assert_eq!(payloads(&out), payloads(&full), "{table} version {v}");
            let (code, stdout, err) = run(["verify", s(&out), "--deep"]);
            assert_eq!(code, 0, "{table} v{v}: {stdout}{err}");
            let m = read_manifest(&out, "data");
            assert_eq!(m["table"]["version"], v);
            let last = m["generations"].as_array().unwrap().last().unwrap().clone();
            assert_eq!(last["watermark"], v);
            // Shards not retired stay as they were.
            let retired: Vec<&str> = (last["retired"].as_array().unwrap().iter())
                .map(|r| r.as_str().unwrap())
                .collect();
            let now = listed(&out);
            for (f, bytes) in &before {
                if !retired.contains(&f.as_str()) {
                    assert_eq!(now.get(f), Some(bytes), "{table} v{v}: {f}");
                }
            }
            match (table, v) {
                // An append retires nothing.
                ("events", 1) | ("events", 4) | ("compacted", 1) | ("compacted", 2) => {
                    assert_eq!(summary["retired"], 0, "{table} v{v}")
                }
                // The optimize rewrote every file: every shard goes, each record is
                // converted once again (not twice).
                ("compacted", 3) => {
                    assert_eq!(summary["retired"].as_u64(), Some(before.len() as u64));
                    assert_eq!(summary["records"], 60);
                }
                // A new column: converted again, said so.
                ("events", 3) => {
                    let why = summary["reconverted"].as_str().unwrap();
                    assert!(why.contains("\"score\""), "{why}");
                    assert_eq!(summary["retired"].as_u64(), Some(before.len() as u64));
                }
                // The delete rewrote files; the overwrite replaced them all.
                _ => assert!(summary["retired"].as_u64().unwrap() > 0, "{table} v{v}"),
            }
        }
        // At the table's version: up to date.
        let stdout = delta(&path, &out, versions - 1, &["--append"]);
        assert!(
            stdout.contains(&format!("up to date at version {}", versions - 1)),
            "{stdout}"
        );
    }
    // A vacuum (of a copy) deletes the files the optimize removed, and commits: the
    // snapshot's rows are the same, so the set is up to date at the new version, and
    // `verify --deep` passes with the set's old inputs gone.
    let copy = crate::copy_tree(&dir.join("compacted"), "append-delta-vacuumed");
    let out = scratch("append-delta-vacuumed-out");
    delta(&copy, &out, 3, &[]);
    let vacuum = "import sys; from deltalake import DeltaTable; \
        print(len(DeltaTable(sys.argv[1]).vacuum(retention_hours=0, \
        enforce_retention_duration=False, dry_run=False)))";
    let python = crate::delta::python().unwrap();
    let done = Command::new(python)
        .args(["-c", vacuum, s(&copy)])
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&done.stdout).trim(),
        "3",
        "files vacuumed"
    );
    let (code, stdout, err) = run(["convert", "delta", s(&copy), "-o", s(&out), "--append"]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("up to date at version"), "{stdout}");
    let (code, stdout, err) = run(["verify", s(&out), "--deep"]);
    assert_eq!(code, 0, "{stdout}{err}");
    // The set's version cleaned from the log (the commits before the checkpoint of
    // version 3 deleted, as log retention does): an append needs the target snapshot
    // only.
    let copy = crate::copy_tree(&dir.join("events"), "append-delta-cleaned");
    let out = scratch("append-delta-cleaned-out");
    delta(&copy, &out, 1, &[]);
    for v in 0..3 {
        fs::remove_file(copy.join(format!("_delta_log/{v:020}.json"))).unwrap();
    }
    let stdout = delta(&copy, &out, 4, &["--append", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["table"]["version"], 4, "{summary}");
    let full = scratch("append-delta-cleaned-full");
    delta(&copy, &full, 4, &[]);
    assert_eq!(
        payloads(&out),
        payloads(&full),
        "the cleaned log's latest version"
    );
    // Columns that the schema change left alone keep appending: the new column `score`
    // (version 3) is not among them.
    let path = dir.join("events");
    let out = scratch("append-delta-columns");
    let cols = ["--columns", "id,value,name"];
    delta(&path, &out, 2, &cols);
    let stdout = delta(
        &path,
        &out,
        3,
        &[&cols[..], &["--append", "--json"]].concat(),
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(summary.get("reconverted").is_none(), "{summary}");
    assert_eq!(summary["retired"], 0, "{summary}");
    let full = scratch("append-delta-columns-full");
    delta(&path, &full, 3, &[&cols[..], &["--overwrite"]].concat());
    assert_eq!(payloads(&out), payloads(&full));
}

/// A deletion vector added to a file (`table-with-dv-small` gains its vector at version
/// 1): the file's shards are retired and its kept rows converted again.
#[test]
fn a_deletion_vector_retires_the_shards_of_its_file() {
    let table = crate::root().join("testdata/delta-kernel/table-with-dv-small");
    let out = scratch("append-delta-dv");
    let args = |v: &str, extra: &[&str]| {
        let mut a: Vec<String> = ["convert", "delta", s(&table), "-o", s(&out), "--version", v]
            .iter()
            .map(|x| x.to_string())
            .collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let (code, _, err) = run(args("0", &[]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(read_manifest(&out, "data")["records"], 10);
    let (code, stdout, err) = run(args("1", &["--append", "--json"]));
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["retired"], 1, "{summary}");
    assert_eq!(summary["records"], 8, "the rows its vector keeps");
    let full = scratch("append-delta-dv-full");
    let (code, _, err) = run([
        "convert",
        "delta",
        s(&table),
        "-o",
        s(&full),
        "--version",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(payloads(&out), payloads(&full));
}

/// `convert iceberg --append`, snapshot by snapshot: appends, a copy-on-write delete, a
/// schema change (converted again), a position delete file, an equality delete file
/// (the files it applies to are read again whole), an append after it. After each, the
/// live records are a full conversion's of that snapshot.
#[test]
fn an_iceberg_table_appends_snapshot_by_snapshot() {
    let Some((_, expected)) = crate::iceberg::tables() else {
        eprintln!("skipped: no pyiceberg venv (run scripts/iceberg_venv.sh)");
        return;
    };
    for table in ["events", "deletes"] {
        let path = crate::iceberg::table_dir(expected, table);
        let snapshots = expected[table].as_array().unwrap();
        let iceberg = |out: &Path, i: usize, extra: &[&str]| {
            let id = crate::iceberg::id_of(&snapshots[i]);
            let mut args = vec!["convert", "iceberg", s(&path), "-o", s(out)];
            args.extend_from_slice(&["--snapshot-id", &id, "--max-records-per-shard", "16"]);
            args.extend_from_slice(extra);
            let (code, stdout, err) = run(args);
            assert_eq!(code, 0, "{table} s{i}: {err}");
            stdout
        };
        let out = scratch(&format!("append-iceberg-{table}"));
        iceberg(&out, 0, &[]);
        for (i, snapshot) in snapshots.iter().enumerate().skip(1) {
            let before = listed(&out);
            let stdout = iceberg(&out, i, &["--append", "--json"]);
            let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(summary["up_to_date"], false, "{table} s{i}");
            let full = scratch(&format!("append-iceberg-{table}-full"));
            iceberg(&full, i, &["--overwrite"]);
            assert_eq!(payloads(&out), payloads(&full), "{table} snapshot {i}");
            let (code, stdout, err) = run(["verify", s(&out), "--deep"]);
            assert_eq!(code, 0, "{table} s{i}: {stdout}{err}");
            let m = read_manifest(&out, "data");
            let last = m["generations"].as_array().unwrap().last().unwrap().clone();
            assert_eq!(last["watermark"], snapshot["snapshot_id"]);
            let retired: Vec<&str> = (last["retired"].as_array().unwrap().iter())
                .map(|r| r.as_str().unwrap())
                .collect();
            let now = listed(&out);
            for (f, bytes) in &before {
                if !retired.contains(&f.as_str()) {
                    assert_eq!(now.get(f), Some(bytes), "{table} s{i}: {f}");
                }
            }
            if (table, i) == ("events", 1) || (table, i) == ("deletes", 1) {
                assert_eq!(summary["retired"], 0, "{table} s{i}: an append");
            }
        }
        let stdout = iceberg(&out, snapshots.len() - 1, &["--append"]);
        assert!(stdout.contains("up to date at snapshot"), "{stdout}");
    }
}

/// A killed `--append --resume` is completed by the same command: the same generation,
/// byte for byte, as an append never killed.
#[test]
fn a_killed_append_resumes() {
    let t = table("append-resume", 3);
    let reference = scratch("append-resume-ref");
    assert_eq!(convert(&t, &reference, &[]).0, 0);
    let base = listed(&reference);
    let base_manifest = read_manifest(&reference, "data");
    add_day(&t, 4, 4000);
    add_day(&t, 5, 5000);
    assert_eq!(convert(&t, &reference, &["--append"]).0, 0);
    let want = listed(&reference);
    let out = scratch("append-resume-out");
    restore(&out, &base, &base_manifest);
    let mut args = vec![
        "convert",
        "parquet",
        s(&t),
        "-o",
        s(&out),
        "--append",
        "--resume",
    ];
    args.extend_from_slice(&SHARDS);
    let code = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "shard:journaled=exit")
        .status()
        .unwrap()
        .code();
    assert_eq!(code, Some(137));
    assert_eq!(
        read_manifest(&out, "data"),
        base_manifest,
        "the old set is live"
    );
    let (code, stdout, err) = run(args.iter().copied().chain(["--json"]));
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["reused"]["shards"], 1, "{summary}");
    assert_eq!(listed(&out), want, "the same generation");
}

/// TFRecord files: a new file is read into the next generation; a changed one retires
/// every shard holding its records (its records are known once read: it is read again
/// whole).
#[test]
fn tfrecord_files_append() {
    let spark = crate::root().join("testdata/tfrecord-in/spark");
    let mut files: Vec<PathBuf> = fs::read_dir(&spark)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tfrecord"))
        .collect();
    files.sort();
    let dir = scratch("append-tfrecord-in");
    for f in &files[..2] {
        fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let out = scratch("append-tfrecord-out");
    let tfrecord = |out: &Path, extra: &[&str]| {
        let mut args = vec!["convert", "tfrecord", s(&dir), "-o", s(out)];
        args.extend_from_slice(&["--max-records-per-shard", "50"]);
        args.extend_from_slice(extra);
        run(args)
    };
    let same_as_full = |what: &str| {
        let full = scratch("append-tfrecord-full");
        let (code, _, err) = tfrecord(&full, &["--overwrite"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(payloads(&out), payloads(&full), "{what}");
        let (code, stdout, err) = run(["verify", s(&out), "--deep"]);
        assert_eq!(code, 0, "{what}: {stdout}{err}");
    };
    assert_eq!(tfrecord(&out, &[]).0, 0);
    let before = listed(&out);
    fs::copy(&files[2], dir.join(files[2].file_name().unwrap())).unwrap();
    let (code, stdout, err) = tfrecord(&out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (summary["generation"].as_u64(), summary["retired"].as_u64()),
        (Some(1), Some(0))
    );
    let now = listed(&out);
    for (f, bytes) in &before {
        assert_eq!(now.get(f), Some(bytes), "{f} stays");
    }
    same_as_full("a new file");
    // The first file, cut to half its records: changed.
    let first = dir.join(files[0].file_name().unwrap());
    let bytes = fs::read(&first).unwrap();
    let (mut at, mut n) = (0, 0);
    while at < bytes.len() {
        let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        at += 16 + len;
        n += 1;
        if n == 40 {
            break;
        }
    }
    fs::write(&first, &bytes[..at]).unwrap();
    let (code, stdout, err) = tfrecord(&out, &["--append", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(summary["retired"].as_u64().unwrap() > 0, "{summary}");
    same_as_full("a changed file");
}

/// TFRecord files whose features are known once read: a new file holding a feature of
/// the set under another kind cannot join it; the append exits 1 naming the feature
/// and publishes nothing.
#[test]
fn tfrecord_files_of_another_kind_stop_an_append() {
    let t = table("append-kinds-table", 1);
    let dir = scratch("append-kinds-in");
    let out = scratch("append-kinds-out");
    let part = t.join("day=1/part-0.parquet");
    // The same rows as TFRecords twice: `y` an int64, then `y` the bytes of `id`.
    for (name, extra) in [
        ("a", &[][..]),
        ("b", &["--exclude", "y", "--rename", "id=y"][..]),
    ] {
        let tmp = scratch(&format!("append-kinds-{name}"));
        let mut args = vec!["convert", "parquet", s(&part), "-o", s(&tmp)];
        args.extend_from_slice(extra);
        assert_eq!(run(args).0, 0);
        fs::copy(
            tmp.join("data-00000-of-00001.tfrecord"),
            dir.join(format!("{name}.tfrecord")),
        )
        .unwrap();
        if name == "a" {
            let (code, _, err) = run(["convert", "tfrecord", s(&dir), "-o", s(&out)]);
            assert_eq!(code, 0, "{err}");
        }
    }
    let before = read_manifest(&out, "data");
    let (code, _, err) = run(["convert", "tfrecord", s(&dir), "-o", s(&out), "--append"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("\"y\"") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(read_manifest(&out, "data"), before, "nothing published");
    let (code, stdout, err) = run(["verify", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
}

/// `--retain 2`: a retired shard stays while a pinned manifest of the last two
/// generations lists it (a training run that pinned it reads it whole), and goes when
/// that generation falls out; `verify` counts it as listed meanwhile.
#[test]
fn retain_keeps_the_last_generations_pinned_sets() {
    let t = table("append-retain", 2);
    let out = scratch("append-retain-out");
    assert_eq!(convert(&t, &out, &[]).0, 0);
    let g0 = listed(&out);
    // Generation 1: a new day. Generation 2: day 1 replaced (retires its shards).
    add_day(&t, 3, 3000);
    assert_eq!(convert(&t, &out, &["--append", "--retain", "2"]).0, 0);
    write_table(&t.join("day=1/part-0.parquet"), 100, 70_000, 100);
    let (code, stdout, err) = convert(&t, &out, &["--append", "--retain", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(summary["retired"].as_u64().unwrap() > 0, "{summary}");
    let pinned1 = out.join("data.manifest-g00001.json");
    assert!(pinned1.exists(), "generation 1's pinned manifest is kept");
    for f in g0.keys() {
        assert!(out.join(f).exists(), "{f}: generation 1's set lists it");
    }
    let (code, stdout, err) = run(["verify", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    let (code, stdout, err) = run(["verify", s(&pinned1)]);
    assert_eq!(code, 0, "the pinned set reads whole: {stdout}{err}");
    // Generation 3 and 4: generation 1 falls out of the last two, and what only it
    // listed goes.
    for day in [4, 5] {
        add_day(&t, day, day * 1000);
        assert_eq!(convert(&t, &out, &["--append", "--retain", "2"]).0, 0);
    }
    assert!(!pinned1.exists());
    let m = read_manifest(&out, "data");
    for f in g0.keys() {
        let live = m["shards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["file"] == f.as_str());
        assert_eq!(out.join(f).exists(), live, "{f}");
    }
    let (code, stdout, err) = run(["verify", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    same_as_full(&t, &out, "retain");
    let (code, _, err) = convert(&t, &out, &["--retain", "2", "--overwrite"]);
    assert_eq!(code, 2, "--retain without --append: {err}");
}

/// `compact`: small appends' generations rewritten as one generation of full-size
/// shards, the same records in the same order; what they replaced goes; a later append
/// still retires by the sources; a second compact has nothing to do.
#[test]
fn compact_rewrites_small_generations_as_full_shards() {
    let t = table("compact", 2);
    let out = scratch("compact-out");
    let size = ["--target-shard-size", "64KiB"];
    let conv = |extra: &[&str]| {
        let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out)];
        args.extend_from_slice(&size);
        args.extend_from_slice(extra);
        let (code, _, err) = run(args);
        assert_eq!(code, 0, "{err}");
    };
    conv(&[]);
    for day in 3..=5 {
        add_day(&t, day, day * 1000);
        conv(&["--append"]);
    }
    let before = read_manifest(&out, "data");
    assert_eq!(
        before["shards"].as_array().unwrap().len(),
        4,
        "one small shard a generation"
    );
    let order = records_of(&out, "data");
    let (code, stdout, err) = run(["compact", s(&out), "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["compacted"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(summary["generation"], 4);
    assert_eq!(summary["replaced"], 4);
    let m = read_manifest(&out, "data");
    let shards = m["shards"].as_array().unwrap();
    assert_eq!(shards.len() as u64, summary["shards"].as_u64().unwrap());
    assert!(shards.len() < 4, "{m}");
    assert!(shards.iter().all(|s| s["generation"] == 4));
    assert_eq!(
        records_of(&out, "data"),
        order,
        "the same records in the same order"
    );
    for old in before["shards"].as_array().unwrap() {
        assert!(!out.join(old["file"].as_str().unwrap()).exists(), "{old}");
    }
    for g in 1..=3 {
        assert!(!out.join(format!("data.manifest-g{g:05}.json")).exists());
    }
    same_as_full_at(&t, &out, &size, "compacted");
    let (code, stdout, err) = run(["compact", s(&out)]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("nothing to compact"), "{stdout}");
    // A later change retires the compacted shards holding its file, by their sources.
    write_table(&t.join("day=1/part-0.parquet"), 50, 80_000, 100);
    conv(&["--append"]);
    same_as_full_at(&t, &out, &size, "after compact");
}

/// [`same_as_full`] with other shard flags.
fn same_as_full_at(table: &Path, out: &Path, flags: &[&str], name: &str) {
    let full = scratch(&format!("append-full-{name}"));
    let mut args = vec![
        "convert",
        "parquet",
        s(table),
        "-o",
        s(&full),
        "--overwrite",
    ];
    args.extend_from_slice(flags);
    let (code, _, err) = run(args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(payloads(out), payloads(&full), "{name}: the live records");
    let (code, stdout, err) = run(["verify", s(out), "--deep"]);
    assert_eq!(code, 0, "{name}: {stdout}{err}");
}

/// The payloads of split `name`'s set in `dir`, sorted.
fn split_payloads(dir: &Path, name: &str) -> Vec<Vec<u8>> {
    let mut out = records_of(dir, name);
    out.sort();
    out
}

/// `--split` by key appends: every record stays in its split across generations, and
/// after a new partition and a replaced file each split holds what a full conversion's
/// does.
#[test]
fn splits_by_key_append_and_stay_stable() {
    let t = table("append-split", 3);
    let out = scratch("append-split-out");
    let split = ["--split", "train=0.7,test=0.3", "--split-key", "id"];
    let go = |dir: &Path, extra: &[&str]| {
        let mut args = vec!["convert", "parquet", s(&t), "-o", s(dir)];
        args.extend_from_slice(&SHARDS);
        args.extend_from_slice(&split);
        args.extend_from_slice(extra);
        let (code, stdout, err) = run(args);
        assert_eq!(code, 0, "{err}");
        stdout
    };
    go(&out, &[]);
    let check = |what: &str| {
        let full = scratch("append-split-full");
        go(&full, &["--overwrite"]);
        for name in ["train", "test"] {
            assert_eq!(
                split_payloads(&out, name),
                split_payloads(&full, name),
                "{what}: {name}"
            );
        }
        let (code, stdout, err) = run(["verify", s(&out)]);
        assert_eq!(code, 0, "{what}: {stdout}{err}");
    };
    add_day(&t, 4, 4000);
    let summary: serde_json::Value =
        serde_json::from_str(&go(&out, &["--append", "--json"])).unwrap();
    assert_eq!(summary["retired"], 0, "{summary}");
    check("a new partition");
    write_table(&t.join("day=2/part-0.parquet"), 120, 52_000, 100);
    let summary: serde_json::Value =
        serde_json::from_str(&go(&out, &["--append", "--json"])).unwrap();
    assert!(summary["retired"].as_u64().unwrap() > 0, "{summary}");
    check("a replaced file");
}

/// A shard whose bytes do not match their CRC stops `compact`: exit 1 naming it,
/// nothing published.
#[test]
fn compact_refuses_a_corrupt_shard() {
    let t = table("compact-corrupt", 1);
    let out = scratch("compact-corrupt-out");
    let size = ["--target-shard-size", "64KiB"];
    for day in 2..=3 {
        let mut args = vec!["convert", "parquet", s(&t), "-o", s(&out)];
        args.extend_from_slice(&size);
        if day > 2 {
            args.push("--append");
        }
        assert_eq!(run(args).0, 0);
        add_day(&t, day, day * 1000);
    }
    let m = read_manifest(&out, "data");
    let victim = out.join(m["shards"][1]["file"].as_str().unwrap());
    let mut bytes = fs::read(&victim).unwrap();
    bytes[20] ^= 0x40; // inside the first payload
    fs::write(&victim, &bytes).unwrap();
    let (code, _, err) = run(["compact", s(&out)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(victim.file_name().unwrap().to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains("CRC"), "{err}");
    assert_eq!(read_manifest(&out, "data"), m, "nothing published");
}
