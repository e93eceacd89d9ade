//! `convert parquet` from the command line: every corpus file, the output folder rules,
//! determinism, compression, index files, interruption and failure cleanup.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use serde_json::Value;

use crate::{convert_parquet, read_manifest, run, s, scratch, shard_files, tfshard};

include!("corpus_table.rs");

/// The parquet-testing corpus: `TFSHARD_PARQUET_TESTING`, else the copy the repository
/// carries in `testdata/parquet-testing` (its FILES.md names the upstream commit).
pub fn corpus() -> PathBuf {
    std::env::var_os("TFSHARD_PARQUET_TESTING")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::root().join("testdata/parquet-testing"))
}

fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, base, out);
        } else {
            out.push(
                path.strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

/// Every file either converts or fails with exit 1 and the expected one-line message;
/// never a panic. A file missing from the table fails the test.
#[test]
fn every_parquet_testing_file_converts_or_fails_cleanly() {
    let base = corpus();
    let mut files = Vec::new();
    for sub in ["data", "bad_data"] {
        walk(&base.join(sub), &base, &mut files);
    }
    files.sort();
    assert!(files.len() > 100, "corpus not found at {}", base.display());
    let out = scratch("corpus");
    let mut failures = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let Some((_, want)) = CORPUS.iter().find(|(f, _)| f == file) else {
            failures.push(format!("{file}: not in the expectation table"));
            continue;
        };
        let dir = out.join(i.to_string());
        let (code, _, err) = convert_parquet(&base.join(file), &dir, &["--quiet"]);
        let manifest = dir.join("data.manifest.json").exists();
        // The same file through arrow-rs alone gives the same bytes, or the
        // same error line: our fixed-size-list decoder changes nothing but speed.
        let plain = out.join(format!("{i}-arrow-rs"));
        let flags = ["--quiet", "--parquet-decoder", "arrow-rs"];
        let (plain_code, _, plain_err) = convert_parquet(&base.join(file), &plain, &flags);
        let same = plain_code == code
            && plain_err.lines().next() == err.lines().next()
            && (!manifest || shard_files(&dir) == shard_files(&plain));
        if !same {
            failures.push(format!(
                "{file}: --parquet-decoder arrow-rs gave {plain_code} ({plain_err:?}), \
                 auto gave {code} ({err:?}) or other bytes"
            ));
        }
        if *want == "OK" {
            if code != 0 || !manifest {
                failures.push(format!("{file}: expected to convert, got {code}: {err}"));
            }
        } else {
            let first = err.lines().next().unwrap_or("");
            let ok = code == 1
                && first.starts_with("error: ")
                && first.contains(file.as_str())
                && first.contains(want)
                && !manifest
                && !err.contains("panicked");
            if !ok {
                failures.push(format!(
                    "{file}: expected exit 1 with {want:?}, got {code}: {err}"
                ));
            }
            let leftovers: Vec<_> = fs::read_dir(&dir).map(|d| d.count()).into_iter().collect();
            if leftovers.iter().any(|&n| n > 0) {
                failures.push(format!("{file}: files left in the output folder"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--parquet-decoder arrow-rs` turns our fixed-size-list decoder off; tables
/// whose lists it does read (pyarrow's `small.parquet`, arrow-rs's row groups of
/// `write_ids`) convert to the same bytes both ways, at one thread and more.
#[test]
fn the_fixed_size_list_decoder_can_be_switched_off_and_changes_no_byte() {
    let out = scratch("decoder_switch");
    let table = out.join("ids.parquet");
    write_ids(&table, &(0..5000).rev().collect::<Vec<_>>(), 700);
    for input in [crate::root().join("testdata/small.parquet"), table] {
        for threads in ["1", "2"] {
            let name = input.file_name().unwrap().to_string_lossy().into_owned();
            let fast = out.join(format!("{name}-{threads}-auto"));
            let plain = out.join(format!("{name}-{threads}-arrow-rs"));
            let flags = [
                "--quiet",
                "--threads",
                threads,
                "--target-shard-size",
                "40KB",
            ];
            let (code, _, err) = convert_parquet(&input, &fast, &flags);
            assert_eq!(code, 0, "{err}");
            let mut arrow_rs = flags.to_vec();
            arrow_rs.extend(["--parquet-decoder", "arrow-rs"]);
            let (code, _, err) = convert_parquet(&input, &plain, &arrow_rs);
            assert_eq!(code, 0, "{err}");
            assert!(shard_files(&fast).len() > 2, "{name}: several shards");
            assert_eq!(
                shard_files(&fast),
                shard_files(&plain),
                "{name}, {threads} threads"
            );
        }
    }
    let (code, _, err) = convert_parquet(
        &out.join("ids.parquet"),
        &out.join("bad"),
        &["--parquet-decoder", "fast"],
    );
    assert_eq!(code, 2, "an unknown decoder is a usage error: {err}");
}

/// Mutated files that made arrow-rs 60.1 panic (or print a raw control
/// character) end in one error line, exit 1, and leave nothing; see
/// `testdata/parquet-corrupt/README.md`. When an upstream fix changes a message, the
/// table shows which defence can go.
#[test]
fn corrupt_parquet_files_never_panic_the_converter() {
    const EXPECTED: &[(&str, &str)] = &[
        ("bit-chunks-out-of-bounds.parquet", "the Parquet reader failed on corrupt data in row group 0: offset + len out of bounds (arrow-buffer-60.1.0/src/util/bit_chunk_iterator.rs:235)"),
        ("bit-util-shift-overflow.parquet", "the Parquet reader failed on corrupt data in row group 1: "),
        ("chunk-negative-start.parquet", "column \"datatype_boolean\": corrupt Parquet footer: row group 0: the column chunk starts at -5 with 69 bytes"),
        ("control-char-in-column-name.parquet", "got int32_byte_stream_\\u{b}plit"),
        ("delta-byte-array-overflow.parquet", "the Parquet reader failed on corrupt data in row group 0: "),
        ("dict-page-missing.parquet", "the Parquet reader failed on corrupt data in row group 0: Decoder for dict should have been set (parquet-60.1.0/src/column/reader/decoder.rs:374)"),
        ("flba-index-out-of-range.parquet", "the Parquet reader failed on corrupt data in row group 1: range start index 5115 out of range"),
        ("flba-unwrap-none.parquet", "the Parquet reader failed on corrupt data in row group 0: called `Option::unwrap()` on a `None` value"),
        ("offset-buffer-bad-utf8.parquet", "the Parquet reader failed on corrupt data in row group 0: called `Result::unwrap()` on an `Err` value: InvalidArgumentError(\"Invalid UTF8"),
        ("page-header-skip-loop.parquet", "Parquet argument error: External: "),
    ];
    let base = crate::root().join("testdata/parquet-corrupt");
    let mut files: Vec<String> = fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    files.sort();
    let listed: Vec<&str> = EXPECTED.iter().map(|(f, _)| *f).collect();
    assert_eq!(files, listed, "every file has an expectation");
    let out = scratch("corrupt_parquet");
    for (file, want) in EXPECTED {
        let dir = out.join(file);
        for threads in ["1", "2"] {
            let (code, stdout, err) =
                convert_parquet(&base.join(file), &dir, &["--quiet", "--threads", threads]);
            assert_eq!(code, 1, "{file}: {err}");
            assert_eq!(err.lines().count(), 1, "{file}: {err}");
            assert!(err.starts_with("error: "), "{file}: {err}");
            assert!(err.contains(file) && err.contains(want), "{file}: {err}");
            assert!(
                !err.contains("panicked") && !err.contains("backtrace"),
                "{file}: {err}"
            );
            assert!(stdout.is_empty());
            assert!(
                !dir.exists() || listing(&dir).is_empty(),
                "{file}: left output"
            );
        }
    }
    // With good files beside it, the one bad file stops every worker and publishes
    // nothing.
    let folder = out.join("mixed");
    fs::create_dir_all(&folder).unwrap();
    // (flba-index-out-of-range.parquet is small.parquet damaged in its second row group.)
    let small = crate::root().join("testdata/small.parquet");
    fs::copy(&small, folder.join("a.parquet")).unwrap();
    fs::copy(
        base.join("flba-index-out-of-range.parquet"),
        folder.join("b.parquet"),
    )
    .unwrap();
    for c in ["c", "d", "e"] {
        fs::copy(&small, folder.join(format!("{c}.parquet"))).unwrap();
    }
    let target = out.join("mixed-out");
    let (code, _, err) = convert_parquet(&folder, &target, &["--threads", "2"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("b.parquet: the Parquet reader failed on corrupt data"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!target.exists() || listing(&target).is_empty());
}

/// Writes a Parquet file of `rows` rows: `x` FixedSizeList<f32>[4], `y` int64, `id` string.
pub fn write_table(path: &Path, rows: usize, first: usize, row_group: usize) {
    write_ids(path, &(first..first + rows).collect::<Vec<_>>(), row_group);
}

/// Writes one record batch as a Parquet file (default writer settings).
pub fn write_batch(path: &Path, batch: &RecordBatch) {
    let mut w =
        ArrowWriter::try_new(fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// Writes the standard test table for the given ids, in the given order: `y` is id % 10.
pub fn write_ids(path: &Path, ids: &[usize], row_group: usize) {
    let mut x = FixedSizeListBuilder::new(Float32Builder::new(), 4);
    for &i in ids {
        x.values()
            .append_slice(&[i as f32, 0.5, -1.0, (i % 7) as f32]);
        x.append(true);
    }
    let y = Int64Array::from_iter_values(ids.iter().map(|&i| (i % 10) as i64));
    let id = StringArray::from_iter_values(ids.iter().map(|&i| format!("id-{i:012}")));
    let batch = RecordBatch::try_from_iter(vec![
        ("x", Arc::new(x.finish()) as ArrayRef),
        ("y", Arc::new(y) as ArrayRef),
        ("id", Arc::new(id) as ArrayRef),
    ])
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group))
        .build();
    let mut w =
        ArrowWriter::try_new(fs::File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The names in a folder, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn inspect_all(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for name in listing(dir) {
        if name.contains(".tfrecord") && !name.ends_with(".idx") {
            let (code, out, err) = run(["inspect", s(&dir.join(&name))]);
            assert_eq!(code, 0, "{err}");
            lines.extend(out.lines().map(str::to_owned));
        }
    }
    lines
}

#[test]
fn converts_with_json_summary_and_sized_shards() {
    let dir = scratch("convert_basic");
    let input = dir.join("t.parquet");
    write_table(&input, 5000, 0, 1000);
    let out = dir.join("out");
    let (code, stdout, err) =
        convert_parquet(&input, &out, &["--target-shard-size", "64KiB", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    for key in [
        "output", "manifest", "records", "shards", "bytes", "seconds",
    ] {
        assert!(summary.get(key).is_some(), "--json lacks {key}");
    }
    assert_eq!(summary["records"], 5000);
    let m = read_manifest(&out, "data");
    let shards = m["shards"].as_array().unwrap();
    assert_eq!(summary["shards"], shards.len());
    let n = shards.len();
    for (i, shard) in shards.iter().enumerate() {
        let name = shard["file"].as_str().unwrap();
        assert_eq!(name, format!("data-{i:05}-of-{n:05}.tfrecord"));
        let bytes = fs::read(out.join(name)).unwrap();
        assert_eq!(shard["bytes"], bytes.len());
        assert!(bytes.len() <= 64 * 1024);
        if i + 1 < n {
            // Within one record (~90 bytes framed) of the target.
            assert!(64 * 1024 - bytes.len() < 100, "shard {i}: {}", bytes.len());
        }
        assert_eq!(shard["crc32c"], format!("{:08x}", crc32c::crc32c(&bytes)));
    }
    assert_eq!(m["records"], 5000);
    assert_eq!(m["inputs"][0]["rows"], 5000);
    assert_eq!(m["features"][0]["name"], "id");
    assert_eq!(m["features"][1]["name"], "x");
    assert_eq!(m["features"][1]["shape"], serde_json::json!([4]));
    assert_eq!(m["options"]["target_shard_size"], 65536);
    assert!(
        !listing(&out).iter().any(|n| n.starts_with('.')),
        "no temporaries left"
    );
    let lines = inspect_all(&out);
    assert_eq!(lines.len(), 5000);
    assert_eq!(
        lines[3],
        r#"{"id": {"bytes": ["id-000000000003"]}, "x": {"float": [3.0, 0.5, -1.0, 3.0]}, "y": {"int64": [3]}}"#
    );
}

#[test]
fn same_bytes_at_any_thread_count_and_every_compression_holds_the_same_records() {
    let dir = scratch("convert_determinism");
    let a = dir.join("a.parquet");
    let b = dir.join("b.parquet");
    write_table(&a, 3000, 0, 700);
    write_table(&b, 2000, 3000, 300);
    let mut plain_lines = None;
    for compression in ["none", "gzip", "zlib"] {
        let mut outputs = Vec::new();
        for threads in ["1", "2", "3"] {
            let out = dir.join(format!("{compression}-{threads}"));
            let (code, _, err) = run([
                "convert",
                "parquet",
                s(&a),
                s(&b),
                "-o",
                s(&out),
                "--threads",
                threads,
                "--target-shard-size",
                "50KB",
                "--compression",
                compression,
            ]);
            assert_eq!(code, 0, "{err}");
            outputs.push(out);
        }
        let files = listing(&outputs[0]);
        for other in &outputs[1..] {
            assert_eq!(listing(other), files);
            for f in &files {
                let (x, y) = (
                    fs::read(outputs[0].join(f)).unwrap(),
                    fs::read(other.join(f)).unwrap(),
                );
                if f.ends_with(".json") {
                    let (mut mx, mut my): (Value, Value) = (
                        serde_json::from_slice(&x).unwrap(),
                        serde_json::from_slice(&y).unwrap(),
                    );
                    mx["created"] = Value::Null;
                    my["created"] = Value::Null;
                    assert_eq!(mx, my, "{compression}: manifest differs");
                } else {
                    assert!(x == y, "{compression}: {f} differs between thread counts");
                }
            }
        }
        let m = read_manifest(&outputs[0], "data");
        for shard in m["shards"].as_array().unwrap() {
            assert!(shard["bytes"].as_u64().unwrap() <= 50_000);
        }
        let lines = inspect_all(&outputs[0]);
        assert_eq!(lines.len(), 5000, "{compression}");
        match &plain_lines {
            None => plain_lines = Some(lines),
            Some(p) => assert!(p == &lines, "{compression} holds other records"),
        }
    }
}

#[test]
fn non_empty_output_needs_overwrite_which_replaces_only_our_files() {
    let dir = scratch("convert_overwrite");
    let input = dir.join("t.parquet");
    write_table(&input, 2000, 0, 500);
    let out = dir.join("out");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("notes.txt"), "keep me").unwrap();
    let (code, _, err) = convert_parquet(&input, &out, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("output folder is not empty"), "{err}");
    assert!(err.contains("--overwrite"), "{err}");
    assert_eq!(listing(&out), ["notes.txt"], "left untouched");

    // A first run with 4 shards, then a rerun with 2: the stale shards go.
    let (code, _, err) = convert_parquet(
        &input,
        &out,
        &["--overwrite", "--max-records-per-shard", "500"],
    );
    assert_eq!(code, 0, "{err}");
    fs::write(out.join("other-00000-of-00001.tfrecord"), "another prefix").unwrap();
    // A later generation's shard and pinned manifest (what an append writes) are the
    // prefix's: verify reports the shard the manifest does not list, and --overwrite
    // removes both.
    fs::copy(
        out.join("data-00000-of-00004.tfrecord"),
        out.join("data-g00001-00000-of-00001.tfrecord"),
    )
    .unwrap();
    fs::copy(
        out.join("data.manifest.json"),
        out.join("data.manifest-g00001.json"),
    )
    .unwrap();
    let (code, stdout, err) = run(["verify", s(&out)]);
    assert_eq!(code, 1, "{stdout}{err}");
    let said = format!("{stdout}{err}");
    assert!(
        said.contains("data-g00001-00000-of-00001.tfrecord") && said.contains("unlisted shard"),
        "{said}"
    );
    assert!(!said.contains("manifest-g00001"), "{said}");
    let (code, _, err) = convert_parquet(
        &input,
        &out,
        &["--overwrite", "--max-records-per-shard", "1000", "--index"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        listing(&out),
        [
            "data-00000-of-00002.tfrecord",
            "data-00000-of-00002.tfrecord.idx",
            "data-00001-of-00002.tfrecord",
            "data-00001-of-00002.tfrecord.idx",
            "data.manifest.json",
            "notes.txt",
            "other-00000-of-00001.tfrecord",
        ]
    );
    // DALI index: offset and framed size of each record.
    let idx = fs::read_to_string(out.join("data-00000-of-00002.tfrecord.idx")).unwrap();
    let shard = fs::read(out.join("data-00000-of-00002.tfrecord")).unwrap();
    let mut expected_offset = 0u64;
    for line in idx.lines() {
        let (offset, size) = line.split_once(' ').unwrap();
        let (offset, size): (u64, u64) = (offset.parse().unwrap(), size.parse().unwrap());
        assert_eq!(offset, expected_offset);
        let len = u64::from_le_bytes(
            shard[offset as usize..offset as usize + 8]
                .try_into()
                .unwrap(),
        );
        assert_eq!(size, len + 16);
        expected_offset += size;
    }
    assert_eq!(expected_offset, shard.len() as u64);
    assert_eq!(idx.lines().count(), 1000);
    // --index with compression is a usage error.
    let (code, _, _) = convert_parquet(
        &input,
        &dir.join("o2"),
        &["--index", "--compression", "gzip"],
    );
    assert_eq!(code, 2);
}

#[test]
fn zero_rows_give_one_empty_shard_or_n_with_min_shards() {
    let dir = scratch("convert_zero");
    let input = dir.join("empty.parquet");
    write_table(&input, 0, 0, 100);
    let out = dir.join("out");
    let (code, _, err) = convert_parquet(&input, &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        listing(&out),
        ["data-00000-of-00001.tfrecord", "data.manifest.json"]
    );
    assert_eq!(read_manifest(&out, "data")["records"], 0);
    assert!(
        read_manifest(&out, "data")["features"][0]["shape"].is_null(),
        "shape is null with zero rows"
    );
    let out = dir.join("out3");
    let (code, _, err) = convert_parquet(
        &input,
        &out,
        &["--min-shards", "3", "--compression", "gzip"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        read_manifest(&out, "data")["shards"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(listing(&out)[2], "data-00002-of-00003.tfrecord.gz");
}

#[test]
fn min_shards_cuts_small_outputs_evenly() {
    let dir = scratch("convert_min_shards");
    let input = dir.join("t.parquet");
    write_table(&input, 1000, 0, 300);
    let out = dir.join("out");
    let (code, _, err) = convert_parquet(&input, &out, &["--min-shards", "4"]);
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&out, "data");
    let records: Vec<u64> = m["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["records"].as_u64().unwrap())
        .collect();
    // Every record has the same framed size here, so the cut is exactly even.
    assert_eq!(records, [250, 250, 250, 250]);
    // A large output already has enough shards: the fill rule stands.
    let out = dir.join("out2");
    let (code, _, err) = convert_parquet(
        &input,
        &out,
        &["--min-shards", "2", "--target-shard-size", "10KB"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        read_manifest(&out, "data")["shards"]
            .as_array()
            .unwrap()
            .len()
            > 2
    );
}

#[test]
fn folder_inputs_are_walked_in_byte_order_skipping_hidden_and_underscore() {
    let dir = scratch("convert_folder");
    let tbl = dir.join("table");
    fs::create_dir_all(tbl.join("date=2024-01-02")).unwrap();
    fs::create_dir_all(tbl.join("date=2024-01-01")).unwrap();
    fs::create_dir_all(tbl.join("_temporary")).unwrap();
    write_table(&tbl.join("date=2024-01-02/part-0.parquet"), 10, 100, 10);
    write_table(&tbl.join("date=2024-01-01/part-1.parquet"), 10, 10, 10);
    write_table(&tbl.join("date=2024-01-01/part-0.parquet"), 10, 0, 10);
    write_table(&tbl.join("_temporary/part-9.parquet"), 10, 900, 10);
    write_table(&tbl.join(".hidden.parquet"), 10, 900, 10);
    fs::write(tbl.join("_SUCCESS"), "").unwrap();
    // Python's sorted(): "A.parquet" < "a-b" (byte order), unlike Path's component order.
    let out = dir.join("out");
    let (code, _, err) = convert_parquet(&tbl, &out, &[]);
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&out, "data");
    let paths: Vec<&str> = m["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    let base = s(&tbl);
    assert_eq!(
        paths,
        [
            format!("{base}/date=2024-01-01/part-0.parquet"),
            format!("{base}/date=2024-01-01/part-1.parquet"),
            format!("{base}/date=2024-01-02/part-0.parquet"),
        ]
    );
    let lines = inspect_all(&out);
    assert!(
        lines[0].contains("id-000000000000")
            && lines[10].contains("id-000000000010")
            && lines[20].contains("id-000000000100")
    );
    // An empty folder is an error.
    let empty = dir.join("empty");
    fs::create_dir_all(&empty).unwrap();
    let (code, _, err) = convert_parquet(&empty, &dir.join("o2"), &[]);
    assert_eq!(code, 1);
    assert!(err.contains("no *.parquet file"), "{err}");
}

#[test]
fn bad_inputs_fail_with_one_line_and_leave_nothing() {
    let dir = scratch("convert_bad");
    let good = dir.join("good.parquet");
    write_table(&good, 100, 0, 50);
    let bytes = fs::read(&good).unwrap();
    let not_parquet = dir.join("notes.parquet");
    fs::write(&not_parquet, "hello, this is not parquet at all").unwrap();
    let truncated = dir.join("truncated.parquet");
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let empty = dir.join("empty.parquet");
    fs::write(&empty, "").unwrap();
    let other_schema = dir.join("other.parquet");
    {
        let batch = RecordBatch::try_from_iter(vec![(
            "y",
            Arc::new(StringArray::from(vec!["a"])) as ArrayRef,
        )])
        .unwrap();
        let mut w = ArrowWriter::try_new(
            fs::File::create(&other_schema).unwrap(),
            batch.schema(),
            None,
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![s(&not_parquet)], "notes.parquet"),
        (vec![s(&truncated)], "truncated.parquet"),
        (vec![s(&empty)], "empty.parquet"),
        (vec![s(&good), "missing.parquet"], "missing.parquet"),
        (
            vec![s(&good), s(&other_schema)],
            "other.parquet: schema differs from",
        ),
    ];
    for (i, (inputs, want)) in cases.iter().enumerate() {
        let out = dir.join(format!("out{i}"));
        let mut args = vec!["convert", "parquet"];
        args.extend(inputs);
        args.extend(["-o", s(&out)]);
        let (code, _, err) = run(args);
        assert_eq!(code, 1, "{inputs:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{inputs:?}: {err}");
        assert!(err.contains(want), "{inputs:?}: {err}");
        assert!(!out.join("data.manifest.json").exists());
        assert!(
            !out.exists() || listing(&out).is_empty(),
            "{inputs:?}: left {:?}",
            listing(&out)
        );
    }
    // A corrupted data page: flip bytes in the middle of the file.
    let mut corrupt = bytes.clone();
    let mid = corrupt.len() / 3;
    for b in &mut corrupt[mid..mid + 64] {
        *b = !*b;
    }
    let corrupt_path = dir.join("corrupt.parquet");
    fs::write(&corrupt_path, &corrupt).unwrap();
    let out = dir.join("out-corrupt");
    let (code, _, err) = convert_parquet(&corrupt_path, &out, &[]);
    assert!(code == 1 || code == 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // An output path under a regular file cannot be created.
    let (code, _, err) = convert_parquet(&good, &good.join("sub"), &[]);
    assert_eq!(code, 1);
    assert!(err.contains("good.parquet/sub"), "{err}");
    // An unknown column lists the available ones.
    let (code, _, err) = convert_parquet(&good, &dir.join("o9"), &["--columns", "x,nope"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no column named \"nope\"; available: x, y, id"),
        "{err}"
    );
    assert!(
        !dir.join("o9").exists(),
        "nothing is created before the plan is valid"
    );
    // Usage errors exit 2, before anything is written (the library's own option
    // checks map to exit 2 too).
    let unwritten = dir.join("never");
    for bad in [
        vec!["--target-shard-size", "12XB"],
        vec!["--threads", "0"],
        vec!["--rename", "a"],
        vec!["--bogus"],
        vec!["--prefix", "../escape"],
        vec!["--index", "--compression", "gzip"],
        vec!["--split", "a=0.5,b=0.4"],
        vec!["--split", "a=0.5,a=0.5"],
        vec!["--min-shards", "0"],
        vec!["--split-key", "id"],
    ] {
        let mut args = vec!["convert", "parquet", s(&good), "-o", s(&unwritten)];
        args.extend(bad.iter().copied());
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{bad:?}: {err}");
        if bad[0] != "--bogus" {
            // (clap's own usage errors add a usage line and a tip.)
            assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
        }
        assert!(!unwritten.exists() && !dir.join("escape-00000-of-00001.tfrecord").exists());
    }
}

/// A write that the file system refuses half-way (a full disk, a quota) fails with one
/// line and leaves nothing. The refusal comes from `RLIMIT_FSIZE` (with `SIGXFSZ`
/// ignored, a write past 256 KiB fails with EFBIG, as a full disk fails with ENOSPC), so
/// the test needs no privilege and runs everywhere.
#[test]
fn a_full_disk_fails_cleanly() {
    use std::os::unix::process::CommandExt;
    let dir = scratch("convert_disk_full");
    let input = dir.join("t.parquet");
    write_table(&input, 20_000, 0, 5000);
    let out = dir.join("out");
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"));
    command.args(["convert", "parquet", s(&input), "-o", s(&out)]);
    // SAFETY: between fork and exec the closure only makes two async-signal-safe calls.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256 << 10,
                rlim_max: 256 << 10,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let output = command.output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let left = listing(&out);
    assert!(left.is_empty(), "left {left:?}");
}

fn wait_for_temporaries(out: &Path) {
    let tmp = out.join(".data.tfshard-tmp");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if fs::read_dir(&tmp).map(|d| d.count() >= 2).unwrap_or(false) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the conversion never started writing");
}

fn slow_convert(input: &Path, out: &Path) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
        .args([
            "convert",
            "parquet",
            s(input),
            "-o",
            s(out),
            "--overwrite",
            "--threads",
            "1",
            "--compression",
            "gzip",
        ])
        .args(["--target-shard-size", "200KB", "--quiet"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn sigterm_and_sigint_remove_temporaries_and_exit_143_130() {
    let dir = scratch("convert_signals");
    let input = dir.join("t.parquet");
    write_table(&input, 300_000, 0, 20_000);
    for (signal, code) in [("-TERM", 143), ("-INT", 130)] {
        let out = dir.join(format!("out{signal}"));
        let mut child = slow_convert(&input, &out);
        wait_for_temporaries(&out);
        std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{signal}");
        assert!(
            listing(&out).is_empty(),
            "{signal}: left {:?}",
            listing(&out)
        );
    }
}

#[test]
fn sigkill_leaves_no_manifest_and_a_rerun_gives_identical_output() {
    let dir = scratch("convert_sigkill");
    let input = dir.join("t.parquet");
    write_table(&input, 300_000, 0, 20_000);
    let reference = dir.join("reference");
    let status = slow_convert(&input, &reference).wait().unwrap();
    assert!(status.success());

    let out = dir.join("out");
    let mut child = slow_convert(&input, &out);
    wait_for_temporaries(&out);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !out.join("data.manifest.json").exists(),
        "no manifest after SIGKILL"
    );
    assert!(
        out.join(".data.tfshard-tmp").exists(),
        "SIGKILL leaves hidden temporaries"
    );
    let status = slow_convert(&input, &out).wait().unwrap();
    assert!(status.success());
    assert_eq!(listing(&out), listing(&reference));
    for f in listing(&reference) {
        if f.ends_with(".tfrecord.gz") {
            assert!(
                fs::read(out.join(&f)).unwrap() == fs::read(reference.join(&f)).unwrap(),
                "{f} differs"
            );
        }
    }
    let _ = tfshard();
}

#[test]
fn sequence_examples_from_nested_lists() {
    let file = corpus().join("data/old_list_structure.parquet");
    let out = scratch("convert_sequence");
    let (code, _, err) = convert_parquet(
        &file,
        &out,
        &["--record-type", "sequence-example", "--overwrite"],
    );
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&out, "data");
    assert_eq!(m["record_type"], "sequence_example");
    let parts: Vec<(&str, &str)> = m["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["part"].as_str().unwrap()))
        .collect();
    assert_eq!(parts, [("a", "feature_lists")]);
    let (code, out_lines, err) = run(["inspect", s(&out.join("data-00000-of-00001.tfrecord"))]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out_lines.trim(),
        r#"{"context": {}, "feature_lists": {"a": [{"int64": [1, 2]}, {"int64": [3, 4]}]}}"#
    );
}

/// `(input, start, end)` of each shard's `sources`, per shard, in the manifest's order.
fn sources_of(manifest: &Value) -> Vec<Vec<(String, u64, u64)>> {
    let shard = |s: &Value| -> Vec<(String, u64, u64)> {
        let sources = s["sources"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        (sources.iter())
            .map(|r| {
                let n = |i: usize| r["rows"][i].as_u64().unwrap();
                (r["input"].as_str().unwrap().to_owned(), n(0), n(1))
            })
            .collect()
    };
    manifest["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(shard)
        .collect()
}

/// Every shard names the inputs it holds records of and the range of their rows: in
/// input order for one output (the ranges run through every file once); a split's
/// shards name ranges of the rows that went to it, in order, within each file; a
/// shuffled shard names every input of its output.
#[test]
fn every_shard_names_the_rows_it_holds() {
    let hive = crate::root().join("testdata/hive");
    let small = ["--target-shard-size", "600B"];
    let plain = scratch("sources-plain");
    let (code, _, err) = convert_parquet(&hive, &plain, &small);
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&plain, "data");
    let shards = crate::in_order_sources(&m);
    assert!(shards.len() > 3, "{} shards", shards.len());
    assert!(
        shards.iter().any(|s| s.len() > 1),
        "some shard holds rows of two files"
    );
    let rows = |m: &Value| -> std::collections::BTreeMap<String, u64> {
        (m["inputs"].as_array().unwrap().iter())
            .map(|i| {
                (
                    i["path"].as_str().unwrap().to_owned(),
                    i["rows"].as_u64().unwrap(),
                )
            })
            .collect()
    };

    let split = scratch("sources-split");
    let args = [
        &small[..],
        &["--split", "train=0.6,test=0.4", "--seed", "3"],
    ]
    .concat();
    let (code, _, err) = convert_parquet(&hive, &split, &args);
    assert_eq!(code, 0, "{err}");
    let mut total = 0;
    for prefix in ["train", "test"] {
        let m = read_manifest(&split, prefix);
        let rows = rows(&m);
        let mut after: std::collections::BTreeMap<String, u64> = Default::default();
        for (shard, sources) in m["shards"].as_array().unwrap().iter().zip(sources_of(&m)) {
            let held: u64 = sources.iter().map(|(_, a, b)| b - a).sum();
            assert!(
                held >= shard["records"].as_u64().unwrap(),
                "{prefix}: {shard}"
            );
            for (input, a, b) in sources {
                assert!(a < b && b <= rows[&input], "{prefix}: {input} [{a}, {b})");
                let end = after.entry(input.clone()).or_default();
                assert!(a >= *end, "{prefix}: {input}'s ranges overlap or go back");
                *end = b;
            }
        }
        total += m["records"].as_u64().unwrap();
    }
    assert_eq!(total, m["records"].as_u64().unwrap());

    let shuffled = scratch("sources-shuffled");
    let args = [&small[..], &["--shuffle", "--seed", "3"]].concat();
    let (code, _, err) = convert_parquet(&hive, &shuffled, &args);
    assert_eq!(code, 0, "{err}");
    let m = read_manifest(&shuffled, "data");
    let every: Vec<(String, u64, u64)> = (rows(&m).into_iter())
        .filter(|(_, r)| *r > 0)
        .map(|(input, r)| (input, 0, r))
        .collect();
    for mut sources in sources_of(&m) {
        sources.sort();
        assert_eq!(sources, every, "a shuffled shard names every input");
    }
}
