//! `convert tfrecord`: TensorFlow-written inputs named as Spark, Beam, Hadoop and TFDS
//! name them (testdata/tfrecord-in, from scripts/make_tfrecord_inputs.py) resharded with
//! their payloads unchanged and in order; shuffles, splits, --min-shards, opaque
//! payloads; every corruption of an input fails cleanly with nothing published; workers
//! plus finalize equal one machine's run.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{read_manifest, root, run, s, scratch, shard_files};

fn input(name: &str) -> PathBuf {
    root().join("testdata/tfrecord-in").join(name)
}

/// (length, zlib CRC-32) of every payload TensorFlow read back from a folder.
fn expected(name: &str) -> Vec<(u64, u32)> {
    let all: Value = serde_json::from_slice(&fs::read(input("expected.json")).unwrap()).unwrap();
    all[name]
        .as_array()
        .unwrap_or_else(|| panic!("no {name} in expected.json"))
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap() as u32))
        .collect()
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// Every payload of a set, in the manifest's shard order, as (length, CRC-32).
fn payloads(dir: &Path, prefix: &str) -> Vec<(u64, u32)> {
    let m = read_manifest(dir, prefix);
    let mut out = Vec::new();
    for shard in m["shards"].as_array().unwrap() {
        let path = dir.join(shard["file"].as_str().unwrap());
        let mut reader = tfshard::tfrecord::open(&path, None).unwrap();
        while let Some(p) = reader.read_record().unwrap() {
            out.push((p.len() as u64, crc32(p)));
        }
    }
    out
}

fn convert(inputs: &[&Path], out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", "tfrecord"];
    args.extend(inputs.iter().map(|p| s(p)));
    args.extend(["-o", s(out)]);
    args.extend_from_slice(extra);
    run(args)
}

fn converted(inputs: &[&Path], out: &Path, extra: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(extra);
    let (code, stdout, err) = convert(inputs, out, &all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn writers_files_are_resharded_with_payloads_identical_and_in_order() {
    for (name, extra, files) in [
        ("spark", &[][..], 3),
        ("beam", &[][..], 3),
        ("hadoop", &[][..], 2),
        ("tfds", &[][..], 2),
        ("sequence", &["--record-type", "sequence-example"][..], 1),
        ("opaque", &["--record-type", "bytes"][..], 1),
    ] {
        let out = scratch(&format!("tfin-{name}"));
        let target = 9000u64;
        let mut flags = vec!["--target-shard-size", "9000"];
        flags.extend_from_slice(extra);
        let summary = converted(&[&input(name)], &out, &flags);
        let want = expected(name);
        assert_eq!(payloads(&out, "data"), want, "{name}");
        assert_eq!(summary["records"], want.len() as u64, "{name}");
        let m = read_manifest(&out, "data");
        // _SUCCESS, .crc sidecars and dataset_info.json are not inputs.
        let inputs = m["inputs"].as_array().unwrap();
        assert_eq!(inputs.len(), files, "{name}: {inputs:?}");
        let rows: u64 = inputs.iter().map(|i| i["rows"].as_u64().unwrap()).sum();
        assert_eq!(rows, want.len() as u64, "{name}");
        crate::in_order_sources(&m);
        // Sizes follow the target: none over it, all but the last within a record of it.
        let largest = want.iter().map(|p| p.0 + 16).max().unwrap();
        let shards = m["shards"].as_array().unwrap();
        for (i, shard) in shards.iter().enumerate() {
            let bytes = shard["bytes"].as_u64().unwrap();
            assert!(bytes <= target, "{name}: shard {i} is {bytes}");
            if i + 1 < shards.len() {
                assert!(bytes + largest > target, "{name}: shard {i} is {bytes}");
            }
        }
        let (code, _, err) = run(["verify", s(&out)]);
        assert_eq!(code, 0, "{name}: {err}");
        match name {
            "opaque" => {
                assert_eq!(m["record_type"], "bytes");
                assert_eq!(m["features"], serde_json::json!([]));
            }
            "sequence" => {
                assert_eq!(m["record_type"], "sequence_example");
                let frames = &m["features"][1];
                assert_eq!(frames["name"], "frames");
                assert_eq!(frames["part"], "feature_lists");
                assert_eq!(frames["shape"], serde_json::json!([4]));
            }
            _ => {
                // As `schema` infers it: fixed where every record has one length.
                let mut args = vec!["schema"];
                args.extend(inputs.iter().map(|i| i["path"].as_str().unwrap()));
                let (code, schema, err) = run(args);
                assert_eq!(code, 0, "{err}");
                let schema: Value = serde_json::from_str(&schema).unwrap();
                assert_eq!(m["features"], schema, "{name}");
                assert_eq!(m["features"][4]["name"], "x");
                assert_eq!(m["features"][4]["shape"], serde_json::json!([3]));
            }
        }
    }
}

#[test]
fn a_file_list_and_recompression_round_trip() {
    // Files named one by one keep the command line's order; gzip out, then back to
    // plain, gives the plain run's bytes.
    let spark = input("spark");
    let mut parts: Vec<PathBuf> = fs::read_dir(&spark)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tfrecord"))
        .collect();
    parts.sort();
    parts.reverse();
    let refs: Vec<&Path> = parts.iter().map(PathBuf::as_path).collect();
    let out = scratch("tfin-reversed");
    converted(&refs, &out, &["--target-shard-size", "30KB"]);
    let want = expected("spark");
    let mut reversed = Vec::new();
    let mut at = want.len();
    for size in [230, 190, 150] {
        reversed.extend_from_slice(&want[at - size..at]);
        at -= size;
    }
    assert_eq!(payloads(&out, "data"), reversed);

    let gz = scratch("tfin-gz");
    converted(&[&spark], &gz, &["--compression", "gzip"]);
    assert!(gz.join("data-00000-of-00001.tfrecord.gz").exists());
    let plain = scratch("tfin-plain-again");
    converted(&[&gz], &plain, &[]);
    let direct = scratch("tfin-plain-direct");
    converted(&[&spark], &direct, &[]);
    assert_eq!(shard_files(&plain), shard_files(&direct));
    assert_eq!(payloads(&plain, "data"), want);
}

#[test]
fn shuffle_keeps_the_multiset_and_is_deterministic_per_seed() {
    let beam = input("beam");
    let run_with = |name: &str, seed: &str, threads: &str| {
        let out = scratch(name);
        converted(
            &[&beam],
            &out,
            &[
                "--shuffle",
                "--seed",
                seed,
                "--threads",
                threads,
                "--target-shard-size",
                "20KB",
            ],
        );
        out
    };
    let a = run_with("tfin-shuf-a", "7", "2");
    let b = run_with("tfin-shuf-b", "7", "1");
    let c = run_with("tfin-shuf-c", "8", "2");
    assert_eq!(
        shard_files(&a),
        shard_files(&b),
        "same seed, any thread count"
    );
    let (pa, pc) = (payloads(&a, "data"), payloads(&c, "data"));
    let want = expected("beam");
    assert_ne!(pa, want, "shuffled");
    assert_ne!(pa, pc, "another seed, another order");
    for mut got in [pa, pc] {
        let mut w = want.clone();
        got.sort_unstable();
        w.sort_unstable();
        assert_eq!(got, w, "the same records");
    }
}

/// A file of `n` opaque records (payload `i` as 4 to 40 bytes of its index).
fn many_records(path: &Path, n: u32) -> Vec<(u64, u32)> {
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for i in 0..n {
        let payload: Vec<u8> = i.to_le_bytes().repeat(1 + (i % 10) as usize);
        tfshard::tfrecord::append_record(&mut bytes, &payload);
        want.push((payload.len() as u64, crc32(&payload)));
    }
    fs::write(path, bytes).unwrap();
    want
}

fn gzipped(from: &Path, to: &Path) {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&fs::read(from).unwrap()).unwrap();
    fs::write(to, gz.finish().unwrap()).unwrap();
}

/// With `--shuffle`, the records of local uncompressed files stay in their maps (only
/// their locations are kept) while compressed inputs are copied; when the locations
/// outgrow half of `--shuffle-memory` they go to bucket files like copies. The shards
/// are the same bytes every way.
#[test]
fn a_shuffle_of_mapped_files_equals_one_of_copied_records() {
    let dir = scratch("tfin-shuf-mapped");
    let (plain, gz) = (dir.join("plain"), dir.join("gz"));
    fs::create_dir_all(&plain).unwrap();
    fs::create_dir_all(&gz).unwrap();
    // 40,000 locations of 16 bytes outgrow half of the smallest budget (1 MiB).
    let mut want = many_records(&plain.join("a.tfrecord"), 40_000);
    want.extend(many_records(&plain.join("b.tfrecord"), 3_000));
    for name in ["a", "b"] {
        gzipped(
            &plain.join(format!("{name}.tfrecord")),
            &gz.join(format!("{name}.tfrecord.gz")),
        );
    }
    let run_with = |name: &str, input: &Path, memory: &str| {
        let out = dir.join(name);
        let flags = [
            "--record-type",
            "bytes",
            "--shuffle",
            "--seed",
            "5",
            "--shuffle-memory",
            memory,
            "--target-shard-size",
            "256KiB",
        ];
        converted(&[input], &out, &flags);
        shard_files(&out)
    };
    let mapped = run_with("mapped", &plain, "1GiB");
    assert!(mapped.len() > 3, "{} shards", mapped.len());
    assert_eq!(run_with("copied", &gz, "1GiB"), mapped, "copied records");
    assert_eq!(
        run_with("mapped-spilled", &plain, "1MiB"),
        mapped,
        "spilled locations"
    );
    assert_eq!(
        run_with("copied-spilled", &gz, "1MiB"),
        mapped,
        "spilled copies"
    );
    let mut got = payloads(&dir.join("mapped"), "data");
    assert_ne!(got, want, "shuffled");
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "every record once");
}

/// A mapped input written to between the pass that checked its records and the pass
/// that writes them out is refused, naming it, and nothing is published.
#[test]
fn an_input_changed_before_the_shuffle_writes_it_fails_cleanly() {
    use std::io::Write;
    let dir = scratch("tfin-shuf-changed");
    let input = dir.join("in.tfrecord");
    many_records(&input, 1_000);
    let out = dir.join("out");
    let gate = dir.join("go");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(["convert", "tfrecord", s(&input), "-o", s(&out)])
        .args(["--record-type", "bytes", "--shuffle"])
        .env(
            "TFSHARD_FAILPOINTS",
            format!("shuffle:scattered=wait:{}", gate.display()),
        )
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::wait_for_failpoint(&mut child, &gate, "every record was scattered");
    let mut file = fs::OpenOptions::new().append(true).open(&input).unwrap();
    let mut more = Vec::new();
    tfshard::tfrecord::append_record(&mut more, b"late");
    file.write_all(&more).unwrap();
    drop(file);
    fs::write(&gate, "").unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{err}");
    let first = err.lines().next().unwrap();
    assert!(
        first.contains("in.tfrecord") && first.contains("changed during the run"),
        "{first}"
    );
    nothing_published(&out);
}

#[test]
fn splits_by_position_and_by_key_and_a_key_splits_as_the_table_does() {
    let spark = input("spark");
    let out = scratch("tfin-split");
    let summary = converted(
        &[&spark],
        &out,
        &["--split", "train=0.8,test=0.2", "--seed", "3"],
    );
    let (train, test) = (payloads(&out, "train"), payloads(&out, "test"));
    assert_eq!(train.len() + test.len(), expected("spark").len());
    assert!(
        !test.is_empty() && train.len() > test.len() * 2,
        "{summary}"
    );

    // A table, and the TFRecords converted from it: --split-key splits them alike.
    let table = root().join("testdata/small.parquet");
    let records = scratch("tfin-split-records");
    let (code, _, err) =
        crate::convert_parquet(&table, &records, &["--target-shard-size", "100KB"]);
    assert_eq!(code, 0, "{err}");
    let flags = ["--split", "train=0.7,test=0.3", "--split-key", "id"];
    let from_table = scratch("tfin-split-table");
    let (code, _, err) = crate::convert_parquet(&table, &from_table, &flags);
    assert_eq!(code, 0, "{err}");
    let from_records = scratch("tfin-split-from-records");
    converted(&[&records], &from_records, &flags);
    for split in ["train", "test"] {
        assert_eq!(
            crate::records_in_order(&from_records, split),
            crate::records_in_order(&from_table, split),
            "{split}"
        );
    }
    let (code, _, err) = convert(
        &[&spark],
        &scratch("tfin-split-nokey"),
        &["--split", "a=0.5,b=0.5", "--split-key", "nope"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("\"nope\""), "{err}");
}

#[test]
fn one_big_input_is_cut_into_min_shards() {
    // The three Beam files merged into one plain file first.
    let big = scratch("tfin-big-in");
    converted(&[&input("beam")], &big, &["--prefix", "big"]);
    let file = big.join("big-00000-of-00001.tfrecord");
    let out = scratch("tfin-min8");
    let summary = converted(&[&file], &out, &["--min-shards", "8"]);
    assert_eq!(summary["shards"], 8, "{summary}");
    assert_eq!(payloads(&out, "data"), expected("beam"));
    let sizes: Vec<u64> = read_manifest(&out, "data")["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap())
        .collect();
    // The second pass of --min-shards names the rows of its even cut.
    crate::in_order_sources(&read_manifest(&out, "data"));
    let total: u64 = sizes.iter().sum();
    for (k, size) in sizes.iter().enumerate() {
        // Each cut at the first record boundary at or past k·T/8: within a record.
        assert!(
            size.abs_diff(total / 8) < 400,
            "shard {k}: {size} of {total}"
        );
    }
}

#[test]
fn index_tfds_and_usage_errors() {
    let out = scratch("tfin-index");
    converted(&[&input("hadoop")], &out, &["--index"]);
    let idx = fs::read_to_string(out.join("data-00000-of-00001.tfrecord.idx")).unwrap();
    assert_eq!(idx.lines().count(), expected("hadoop").len());

    let tfds = scratch("tfin-tfds");
    converted(
        &[&input("spark")],
        &tfds,
        &["--tfds", "toy", "--split", "train=0.8,test=0.2"],
    );
    assert!(tfds.join("toy/1.0.0/dataset_info.json").exists());

    for (extra, why) in [
        (
            &["--record-type", "bytes", "--tfds", "x"][..],
            "record-type bytes",
        ),
        (
            &[
                "--record-type",
                "bytes",
                "--split",
                "a=0.5,b=0.5",
                "--split-key",
                "id",
            ][..],
            "split-key",
        ),
        (&["--columns", "id"][..], "--columns"),
        (&["--index", "--compression", "gzip"][..], "index"),
    ] {
        let (code, _, err) = convert(&[&input("spark")], &scratch("tfin-usage"), extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(why), "{extra:?}: {err}");
    }
    // A folder of two splits is not merged into one output.
    let (code, _, err) = convert(&[&tfds.join("toy/1.0.0")], &scratch("tfin-two"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("train.manifest.json") || err.contains("toy-train"),
        "{err}"
    );
    // A split's manifest names it.
    let one = scratch("tfin-one-split");
    let summary = converted(
        &[&tfds.join("toy/1.0.0/toy-train.manifest.json")],
        &one,
        &[],
    );
    let train = read_manifest(&tfds.join("toy/1.0.0"), "toy-train");
    assert_eq!(summary["records"], train["records"]);
    // Forcing a compression the file does not have is a clear data error.
    let (code, _, err) = convert(
        &[&input("spark")],
        &scratch("tfin-forced"),
        &["--input-compression", "gzip"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("part-00000"), "{err}");
    let (code, _, err) = convert(
        &[&root().join("testdata/images")],
        &scratch("tfin-none"),
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no TFRecord files"), "{err}");
}

/// Nothing of a failed run is left: no manifest, no shard, no hidden folder.
fn nothing_published(out: &Path) {
    let left: Vec<String> = match fs::read_dir(out) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn every_corruption_of_an_input_fails_cleanly_and_publishes_nothing() {
    let plain = fs::read(input("sequence/frames.tfrecord")).unwrap();
    let len = u64::from_le_bytes(plain[..8].try_into().unwrap()) as usize;
    let second = len + 16;
    let len2 = u64::from_le_bytes(plain[second..second + 8].try_into().unwrap()) as usize;
    let gz = fs::read(input("beam/data-00001-of-00003.tfrecord.gz")).unwrap();
    let flip = |at: usize| {
        let mut b = plain.clone();
        b[at] ^= 0x04;
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "length",
            flip(second + 1),
            "length CRC mismatch",
            "record 1, offset",
        ),
        (
            "length-crc",
            flip(second + 9),
            "length CRC mismatch",
            "record 1, offset",
        ),
        (
            "data",
            flip(second + 12 + 3),
            "data CRC mismatch",
            "record 1, offset",
        ),
        (
            "data-crc",
            flip(second + 12 + len2 + 1),
            "data CRC mismatch",
            "record 1, offset",
        ),
        (
            "cut-header",
            plain[..second + 5].to_vec(),
            "truncated",
            "record 1",
        ),
        (
            "cut-data",
            plain[..second + 20].to_vec(),
            "truncated",
            "record 1",
        ),
        (
            "cut-end",
            plain[..plain.len() - 1].to_vec(),
            "truncated",
            "offset",
        ),
        (
            "gz-cut",
            gz[..gz.len() / 2].to_vec(),
            "truncated",
            ".tfrecord.gz",
        ),
        (
            "gz-trailing",
            [&gz[..], b"garbage"].concat(),
            "trailing",
            ".tfrecord.gz",
        ),
    ];
    for (name, bytes, problem, place) in cases {
        let dir = scratch(&format!("tfin-bad-{name}"));
        let file = dir.join(if name.starts_with("gz") {
            "bad.tfrecord.gz"
        } else {
            "bad.tfrecord"
        });
        fs::write(&file, bytes).unwrap();
        let good = input("spark");
        let out = scratch(&format!("tfin-bad-out-{name}"));
        // With --shuffle, plain files are checked through a map: the same line.
        let mut lines = Vec::new();
        for (threads, shuffle) in [("1", false), ("2", false), ("2", true)] {
            let mut flags = vec![
                "--record-type",
                "bytes",
                "--threads",
                threads,
                "--target-shard-size",
                "4KB",
            ];
            if shuffle {
                flags.push("--shuffle");
            }
            let (code, _, err) = convert(&[&good, &file], &out, &flags);
            assert_eq!(code, 1, "{name}: {err}");
            assert!(!err.contains("panicked"), "{name}: {err}");
            let first = err.lines().next().unwrap().to_owned();
            assert!(first.contains("bad.tfrecord"), "{name}: {first}");
            assert!(first.contains(problem), "{name}: {first}");
            assert!(first.contains(place), "{name}: {first}");
            nothing_published(&out);
            lines.push(first);
        }
        assert!(lines.iter().all(|l| *l == lines[0]), "{name}: {lines:?}");
    }
    // SequenceExamples with no flag and no manifest to say so are not read as Examples
    // (whose spec would miss their feature lists).
    let out = scratch("tfin-seq-unsaid");
    let (code, _, err) = convert(&[&input("sequence")], &out, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("frames.tfrecord: record 0, offset 0: payload has feature_lists"),
        "{err}"
    );
    assert!(err.contains("--record-type sequence-example"), "{err}");
    nothing_published(&out);
    // A shard whose bytes changed under valid framing (a payload byte, its CRC
    // recomputed) is caught by the CRC32C the manifest beside it lists.
    let listed = scratch("tfin-listed");
    converted(
        &[&input("spark")],
        &listed,
        &["--target-shard-size", "30KB"],
    );
    let shard = listed.join("data-00001-of-00003.tfrecord");
    let mut reader = tfshard::tfrecord::open(&shard, None).unwrap();
    let mut changed = Vec::new();
    let mut i = 0;
    while let Some(p) = reader.read_record().unwrap() {
        let mut p = p.to_vec();
        if i == 3 {
            let last = p.len() - 1;
            p[last] ^= 0x01;
        }
        tfshard::tfrecord::append_record(&mut changed, &p);
        i += 1;
    }
    fs::write(&shard, &changed).unwrap();
    let out = scratch("tfin-bad-listed");
    for shuffle in [None, Some("--shuffle")] {
        let mut flags = vec!["--record-type", "bytes"];
        flags.extend(shuffle);
        let (code, _, err) = convert(&[&listed], &out, &flags);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(
                "data-00001-of-00003.tfrecord: differs from the manifest that lists it: CRC32C"
            ),
            "{err}"
        );
        nothing_published(&out);
    }
    // A payload that is not an Example names its record, with the hint.
    let out = scratch("tfin-bad-payload");
    let (code, _, err) = convert(&[&input("opaque")], &out, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("blobs.tfrecord: record 0, offset 0"), "{err}");
    assert!(err.contains("--record-type bytes"), "{err}");
    nothing_published(&out);
}

#[test]
fn workers_plus_finalize_equal_one_machines_run() {
    let inputs = [input("spark"), input("beam"), input("tfds")];
    let refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let flags = [
        "--target-shard-size",
        "16KB",
        "--split",
        "train=0.75,test=0.25",
    ];
    let one = scratch("tfin-one-machine");
    converted(&refs, &one, &flags);
    let parts = scratch("tfin-workers");
    for i in ["2", "0", "1"] {
        let mut f = flags.to_vec();
        f.extend(["--num-workers", "3", "--worker-index", i]);
        converted(&refs, &parts, &f);
    }
    let (code, _, err) = run(["finalize", s(&parts)]);
    assert_eq!(code, 0, "{err}");
    for split in ["train", "test"] {
        assert_eq!(
            crate::records_in_order(&parts, split),
            crate::records_in_order(&one, split),
            "{split}"
        );
        let (a, b) = (read_manifest(&parts, split), read_manifest(&one, split));
        assert_eq!(a["features"], b["features"], "{split}");
        assert_eq!(a["inputs"], b["inputs"], "{split}");
    }
}

#[test]
fn a_killed_run_resumes_to_the_same_output() {
    let inputs = [input("spark"), input("hadoop")];
    let refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let flags = ["--target-shard-size", "8KB", "--compression", "gzip"];
    let whole = scratch("tfin-resume-whole");
    converted(&refs, &whole, &flags);
    let out = scratch("tfin-resume");
    let mut args = vec!["convert", "tfrecord"];
    args.extend(refs.iter().map(|p| s(p)));
    args.extend(["-o", s(&out), "--resume"]);
    args.extend_from_slice(&flags);
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "shard:journaled=exit")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(137));
    assert!(!out.join("data.manifest.json").exists());
    let mut again = args.clone();
    again.push("--json");
    let (code, stdout, err) = run(again);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["reused"]["shards"], 1, "{summary}");
    assert_eq!(shard_files(&out), shard_files(&whole));
    let (mut a, mut b) = (read_manifest(&out, "data"), read_manifest(&whole, "data"));
    a.as_object_mut().unwrap().remove("created");
    b.as_object_mut().unwrap().remove("created");
    assert_eq!(a, b);
}

#[test]
fn a_set_of_ours_keeps_its_manifests_spec_and_mixed_inputs_merge() {
    // Our own set: the features its manifest lists (with their Arrow types), which is
    // what `schema` gives for it; the file CRC32Cs vouch for the records.
    let table = root().join("testdata/small.parquet");
    let ours = scratch("tfin-ours");
    let flags = ["--target-shard-size", "100KB"];
    let (code, _, err) = crate::convert_parquet(&table, &ours, &flags);
    assert_eq!(code, 0, "{err}");
    let out = scratch("tfin-ours-resharded");
    converted(&[&ours], &out, &["--target-shard-size", "50KB"]);
    let (a, b) = (read_manifest(&out, "data"), read_manifest(&ours, "data"));
    assert_eq!(a["features"], b["features"]);
    assert!(a["features"][0]["arrow_type"].is_string(), "{a}");
    assert_eq!(
        crate::records_in_order(&out, "data"),
        crate::records_in_order(&ours, "data")
    );
    // Workers each take the manifest's spec too: finalize keeps it as it is.
    let parts = scratch("tfin-ours-workers");
    for i in ["0", "1", "2"] {
        let flags = [
            "--target-shard-size",
            "50KB",
            "--num-workers",
            "3",
            "--worker-index",
            i,
        ];
        converted(&[&ours], &parts, &flags);
    }
    let (code, _, err) = run(["finalize", s(&parts)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read_manifest(&parts, "data")["features"], b["features"]);
    assert_eq!(
        crate::records_in_order(&parts, "data"),
        crate::records_in_order(&ours, "data")
    );
    // Beside records parsed for their spec, a listed set's spec merges as inference
    // would: a feature fixed in both stays fixed, one missing from some records is
    // variable.
    let spark = scratch("tfin-spark-ours");
    converted(&[&input("spark")], &spark, &[]);
    let mixed = scratch("tfin-mixed");
    converted(&[&spark, &input("beam")], &mixed, &[]);
    let (code, schema, err) = run(["schema", s(&input("spark")), s(&input("beam"))]);
    assert_eq!(code, 0, "{err}");
    let schema: Value = serde_json::from_str(&schema).unwrap();
    assert_eq!(read_manifest(&mixed, "data")["features"], schema);
}
