//! Delta Lake tables: tables written here by `deltalake` (delta-rs), with the
//! rows its own reader returns as the expected records (scripts/delta_tables.py); the
//! Delta project's own test tables (testdata/delta-kernel/); errors; workers.
//!
//! Without `.venv-delta` (scripts/delta_venv.sh) the deltalake tests say they were
//! skipped; `.ci/run` installs it and sets `TFSHARD_REQUIRE_SERVERS=1`, so there a
//! missing venv fails.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::{
    copy_tree as copy_table, feature_shape, inspect_all as records, read_manifest,
    records_in_order, root, run, s, scratch,
};

/// The deltalake venv's python: `TFSHARD_DELTA_VENV`, else `.venv-delta`.
pub(crate) fn python() -> Option<PathBuf> {
    let dir = std::env::var_os("TFSHARD_DELTA_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-delta"));
    let python = dir.join("bin/python");
    if python.exists() {
        return Some(python);
    }
    if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
        panic!("TFSHARD_REQUIRE_SERVERS is set but .venv-delta is missing (scripts/delta_venv.sh)");
    }
    None
}

/// The folder scripts/delta_tables.py wrote once for every test, and its expected.json.
pub(crate) fn tables() -> Option<&'static (PathBuf, Value)> {
    static TABLES: OnceLock<Option<(PathBuf, Value)>> = OnceLock::new();
    TABLES
        .get_or_init(|| {
            let python = python()?;
            let dir = scratch("delta-tables");
            let out = std::process::Command::new(python)
                .arg(root().join("scripts/delta_tables.py"))
                .arg(&dir)
                .output()
                .expect("run scripts/delta_tables.py");
            assert!(
                out.status.success(),
                "delta_tables.py: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let expected = std::fs::read(dir.join("expected.json")).unwrap();
            Some((dir, serde_json::from_slice(&expected).unwrap()))
        })
        .as_ref()
}

macro_rules! need_tables {
    () => {
        match tables() {
            Some(t) => t,
            None => {
                eprintln!("skipped: no deltalake venv (run scripts/delta_venv.sh)");
                return;
            }
        }
    };
}

fn convert(table: &Path, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", "delta", s(table), "-o", s(out), "--overwrite"];
    args.extend_from_slice(extra);
    run(args)
}

/// The expected snapshot of `table` at `version`.
fn snapshot<'a>(expected: &'a Value, table: &str, version: u64) -> &'a Value {
    &expected[table][version as usize]
}

fn rfc3339(ms: i64) -> String {
    tfshard::convert::rfc3339_ms(ms)
}

/// An embedding column that deltalake wrote from pyarrow's `fixed_size_list<float>[32]`
/// (Delta records `array<float>`; the files keep the fixed-size type in their Arrow
/// schema) converts to deltalake's rows, its length the spec's fixed shape.
#[test]
fn a_fixed_size_list_column_keeps_its_shape() {
    let (dir, expected) = need_tables!();
    let want = snapshot(expected, "embeddings", 1);
    let out = scratch("delta-embeddings-shape");
    let (code, _, err) = convert(&dir.join("embeddings"), &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out), want["records"].as_array().unwrap().clone());
    assert_eq!(feature_shape(&out, "emb"), (json!("float"), json!([32])));
    let (code, spec, err) = run(["schema", s(&out), "--format", "python"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        spec.contains(r#""emb": tf.io.FixedLenFeature([32], tf.float32)"#),
        "{spec}"
    );
}

#[test]
fn every_version_converts_to_deltalakes_rows_in_file_order() {
    let (dir, expected) = need_tables!();
    for (table, versions) in [
        ("events", 5u64),
        ("overwritten", 2),
        ("nested", 2),
        ("ntz", 1),
        ("embeddings", 2),
    ] {
        for version in 0..versions {
            let want = snapshot(expected, table, version);
            let out = scratch(&format!("delta-{table}-v{version}"));
            let v = version.to_string();
            let (code, stdout, err) = convert(&dir.join(table), &out, &["--version", &v, "--json"]);
            assert_eq!(code, 0, "{table} v{version}: {err}");
            assert_eq!(
                records(&out),
                want["records"].as_array().unwrap().clone(),
                "{table} at version {version}"
            );
            let summary: Value = serde_json::from_str(&stdout).unwrap();
            let manifest = read_manifest(&out, "data");
            let when = rfc3339(want["timestamp_ms"].as_i64().unwrap());
            for t in [&summary["table"], &manifest["table"]] {
                assert_eq!(t["format"], "delta");
                assert_eq!(t["version"], version);
                assert_eq!(t["timestamp"], when.as_str());
                assert_eq!(t["location"], s(&dir.join(table)));
            }
            // The log file that defines the snapshot, then the data files in order.
            let inputs = manifest["inputs"].as_array().unwrap();
            assert!(
                inputs[0]["path"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("_delta_log/{version:020}.json")),
                "{inputs:?}"
            );
            let files: Vec<String> = inputs[1..]
                .iter()
                .map(|i| i["path"].as_str().unwrap().to_owned())
                .collect();
            let want_files: Vec<String> = want["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| format!("{}/{}", s(&dir.join(table)), f.as_str().unwrap()))
                .collect();
            assert_eq!(files, want_files);
            let rows: u64 = inputs.iter().map(|i| i["rows"].as_u64().unwrap()).sum();
            assert_eq!(rows, want["records"].as_array().unwrap().len() as u64);
        }
    }
    // The latest by default: the version after the checkpoint.
    let out = scratch("delta-events-latest");
    let (code, stdout, err) = convert(&dir.join("events"), &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("at version 4"), "{stdout}");
    assert_eq!(
        records(&out),
        snapshot(expected, "events", 4)["records"]
            .as_array()
            .unwrap()
            .clone()
    );
}

#[test]
fn timestamps_name_the_last_commit_at_or_before_them() {
    let (dir, expected) = need_tables!();
    let events = dir.join("events");
    let at = |v: u64| {
        snapshot(expected, "events", v)["timestamp_ms"]
            .as_i64()
            .unwrap()
    };
    for (t, version) in [
        (rfc3339(at(2)), 2u64),
        (rfc3339(at(3) - 1), 2),
        (rfc3339(at(0)), 0),
        ("2999-01-01T00:00:00+01:00".to_owned(), 4),
    ] {
        let out = scratch("delta-timestamp");
        let (code, stdout, err) = convert(&events, &out, &["--timestamp", &t, "--json"]);
        assert_eq!(code, 0, "{t}: {err}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["table"]["version"], version, "{t}");
    }
    let out = scratch("delta-timestamp-early");
    let early = rfc3339(at(0) - 1000);
    let (code, _, err) = convert(&events, &out, &["--timestamp", &early]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("before the first commit (version 0"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, _, err) = convert(&events, &out, &["--timestamp", "yesterday"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = convert(&events, &out, &["--timestamp", &early, "--version", "1"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn one_version_gives_the_same_bytes_at_any_thread_count() {
    let (dir, _) = need_tables!();
    let events = dir.join("events");
    let mut outputs = Vec::new();
    for threads in ["1", "2", "3"] {
        let out = scratch(&format!("delta-threads-{threads}"));
        let (code, _, err) = convert(
            &events,
            &out,
            &[
                "--version",
                "3",
                "--threads",
                threads,
                "--target-shard-size",
                "4KiB",
            ],
        );
        assert_eq!(code, 0, "{err}");
        outputs.push(crate::shard_files(&out));
    }
    assert!(outputs[0].len() > 2, "several shards");
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], outputs[2]);
}

#[test]
fn workers_name_the_version_and_finalize_equals_one_machine() {
    let (dir, _) = need_tables!();
    let events = dir.join("events");
    let out = scratch("delta-workers");
    let _ = std::fs::remove_dir_all(&out);
    let (code, _, err) = run([
        "convert",
        "delta",
        s(&events),
        "-o",
        s(&out),
        "--num-workers",
        "2",
        "--worker-index",
        "0",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--version"), "{err}");
    for i in 0..3 {
        let i = i.to_string();
        let (code, _, err) = run([
            "convert",
            "delta",
            s(&events),
            "-o",
            s(&out),
            "--version",
            "4",
            "--num-workers",
            "3",
            "--worker-index",
            &i,
            "--target-shard-size",
            "8KiB",
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let one = scratch("delta-workers-one");
    let (code, _, err) = convert(
        &events,
        &one,
        &["--version", "4", "--target-shard-size", "8KiB"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        records_in_order(&out, "data"),
        records_in_order(&one, "data")
    );
    assert_eq!(
        read_manifest(&out, "data")["table"],
        read_manifest(&one, "data")["table"]
    );

    // Parts of two versions: refused, naming both.
    let mixed = scratch("delta-workers-mixed");
    let _ = std::fs::remove_dir_all(&mixed);
    for (i, v) in [("0", "3"), ("1", "4")] {
        let (code, _, err) = run([
            "convert",
            "delta",
            s(&events),
            "-o",
            s(&mixed),
            "--version",
            v,
            "--num-workers",
            "2",
            "--worker-index",
            i,
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize", s(&mixed)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("version 4") && err.contains("version 3"),
        "{err}"
    );
    assert!(!mixed.join("data.manifest.json").exists());
}

#[test]
fn partition_filters_keep_those_files_and_split_and_shuffle_work() {
    let (dir, expected) = need_tables!();
    let events = dir.join("events");
    let out = scratch("delta-filter");
    let (code, _, err) = convert(
        &events,
        &out,
        &[
            "--partition-filter",
            "region=eu west",
            "--partition-filter",
            "bucket=1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let want: Vec<Value> = snapshot(expected, "events", 4)["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["region"]["bytes"][0] == "eu west" && r["bucket"]["int64"][0] == 1)
        .cloned()
        .collect();
    assert!(!want.is_empty());
    assert_eq!(records(&out), want);
    // The filters change the output: the manifest records them, as given.
    assert_eq!(
        read_manifest(&out, "data")["options"]["partition_filter"],
        serde_json::json!(["region=eu west", "bucket=1"])
    );
    // Only partition columns: no column of the files is read.
    let (code, _, err) = convert(&events, &out, &["--columns", "day,region"]);
    assert_eq!(code, 0, "{err}");
    let got = records(&out);
    assert_eq!(got.len(), 110);
    assert!(
        got.iter().all(|r| r.as_object().unwrap().len() == 2),
        "{got:?}"
    );
    let (code, _, err) = convert(&events, &out, &["--partition-filter", "name=row-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a partition column"), "{err}");

    let split = scratch("delta-split");
    let (code, stdout, err) = convert(
        &events,
        &split,
        &[
            "--split",
            "train=0.8,test=0.2",
            "--shuffle",
            "--seed",
            "7",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    let total = summary["splits"]["train"]["records"].as_u64().unwrap()
        + summary["splits"]["test"]["records"].as_u64().unwrap();
    assert_eq!(total, 110);
}

#[test]
fn parquet_refuses_the_table_its_folders_and_its_files() {
    let (dir, expected) = need_tables!();
    let events = dir.join("events");
    let first = snapshot(expected, "events", 4)["files"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let partition = events.join("day=2026-11-28");
    for input in [events.clone(), partition, events.join(&first)] {
        let out = scratch("delta-as-parquet");
        let (code, _, err) = run(["convert", "parquet", s(&input), "-o", s(&out)]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("tfshard convert delta"), "{err}");
        assert!(err.contains(s(&events)), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn bad_tables_fail_with_one_line() {
    let (dir, expected) = need_tables!();
    let events = dir.join("events");
    let plain = scratch("delta-not-a-table");
    std::fs::create_dir_all(&plain).unwrap();
    fails(&plain, &[], "not a Delta table: no _delta_log/");
    fails(
        &events,
        &["--version", "99"],
        "version 99 does not exist (latest 4)",
    );

    let missing = copy_table(&events, "delta-missing-file");
    let file = snapshot(expected, "events", 4)["files"][3]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_file(missing.join(&file)).unwrap();
    fails(
        &missing,
        &[],
        &format!("data file {file} is named by the log of version 4 but is missing"),
    );
    // A data file that is no Parquet: named as the table was given, not resolved.
    let broken = copy_table(&events, "delta-broken-file");
    std::fs::write(broken.join(&file), b"not parquet").unwrap();
    fails(&broken, &[], &format!("{}/{file}: ", s(&broken)));
    // No table at all, and a file where the table should be.
    fails(&scratch("delta-nothing-here"), &[], "delta-nothing-here");
    let file_table = scratch("delta-a-file").join("table");
    std::fs::create_dir_all(file_table.parent().unwrap()).unwrap();
    std::fs::write(&file_table, b"").unwrap();
    fails(&file_table, &[], "not a Delta table: not a folder");

    let truncated = copy_table(&events, "delta-truncated-log");
    let log = truncated.join("_delta_log/00000000000000000004.json");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, &text[..text.len() - 40]).unwrap();
    fails(&truncated, &[], "00000000000000000004.json line");

    let checkpoint = copy_table(&events, "delta-bad-checkpoint");
    std::fs::write(
        checkpoint.join("_delta_log/00000000000000000003.checkpoint.parquet"),
        b"not parquet at all",
    )
    .unwrap();
    fails(
        &checkpoint,
        &[],
        "corrupt checkpoint: _delta_log/00000000000000000003.checkpoint.parquet is not a Parquet file",
    );
}

/// The Delta project's own test tables (testdata/delta-kernel/, see its FILES.md) that
/// convert: to the rows deltalake reads from them (sorted: deletion vectors leave no
/// file order for another reader to check).
const CONVERTING: &[&str] = &[
    "basic-decimal-table",
    "basic_partitioned",
    "cdf-column-mapping-id-mode",
    "cdf-column-mapping-name-mode",
    "cdf-table-with-dv",
    "external-table-different-nullability",
    "mixed-nulls",
    "table-with-dv-small",
    "timestamp-partitioned-table",
    "v1-multi-part-struct-stats-only",
    "v2-checkpoints-parquet-with-sidecars",
    "v2-classic-checkpoint-parquet",
];

/// Those that fail, with what the one line must name.
const FAILING: &[(&str, &str)] = &[
    ("table-with-geo", "geometry"),
    ("unshredded-variant", "'variantType'"),
    ("void-column", "void_col"),
    (
        "with_checkpoint_no_last_checkpoint",
        "data file part-00000-70b1dcdf-0236-4f63-a072-124cdbafd8a0-c000.snappy.parquet",
    ),
];

#[test]
fn the_delta_projects_tables_convert_to_deltalakes_rows_or_fail_naming_why() {
    let Some(python) = python() else {
        eprintln!("skipped: no deltalake venv (run scripts/delta_venv.sh)");
        return;
    };
    let tables = root().join("testdata/delta-kernel");
    let out = scratch("delta-real");
    let status = std::process::Command::new(python)
        .arg(root().join("scripts/delta_tables.py"))
        .arg(&out)
        .arg("--real")
        .args(CONVERTING.iter().map(|t| tables.join(t)))
        .status()
        .unwrap();
    assert!(status.success());
    let expected: Value =
        serde_json::from_slice(&std::fs::read(out.join("real.json")).unwrap()).unwrap();
    for table in CONVERTING {
        let shards = scratch(&format!("delta-real-{table}"));
        let (code, _, err) = convert(&tables.join(table), &shards, &[]);
        assert_eq!(code, 0, "{table}: {err}");
        // Rows are counted as the snapshot keeps them (deletion vectors applied).
        crate::in_order_sources(&crate::read_manifest(&shards, "data"));
        let mut got = records(&shards);
        got.sort_by_key(|r| r.to_string());
        let mut want = expected[table].as_array().unwrap().clone();
        want.sort_by_key(|r| r.to_string());
        assert_eq!(got, want, "{table}");
    }
    for (table, needle) in FAILING {
        fails(&tables.join(table), &[], needle);
    }
    // A variant column left out: the rest converts.
    let shards = scratch("delta-real-variant-excluded");
    let (code, _, err) = convert(
        &tables.join("unshredded-variant"),
        &shards,
        &["--columns", "id"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&shards).len(), 102);
}

#[test]
fn corrupt_checkpoints_fail_with_one_line() {
    let tables = root().join("testdata/delta-kernel");
    // A multi-part checkpoint missing a part.
    let table = copy_table(
        &tables.join("v1-multi-part-struct-stats-only"),
        "delta-missing-part",
    );
    let part = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.to_string_lossy()
                .contains(".checkpoint.0000000002.0000000003")
        })
        .expect("a three-part checkpoint");
    std::fs::remove_file(&part).unwrap();
    fails(
        &table,
        &[],
        "the checkpoint of version 5 is missing part 2 of 3",
    );
    // A v2 checkpoint's sidecar that is not Parquet.
    let table = copy_table(
        &tables.join("v2-checkpoints-parquet-with-sidecars"),
        "delta-bad-sidecar",
    );
    let sidecar = std::fs::read_dir(table.join("_delta_log/_sidecars"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    std::fs::write(&sidecar, b"PAR1 but nothing else").unwrap();
    fails(&table, &[], "corrupt checkpoint: _delta_log/_sidecars/");
}

#[test]
fn resume_continues_the_snapshot_the_interrupted_run_read() {
    let (dir, _) = need_tables!();
    let table = copy_table(&dir.join("events"), "delta-resume-table");
    let size = ["--target-shard-size", "4KiB"];
    let whole = scratch("delta-resume-whole");
    let (code, _, err) = convert(&table, &whole, &size);
    assert_eq!(code, 0, "{err}");
    let out = scratch("delta-resume");
    let _ = std::fs::remove_dir_all(&out);
    let mut args = vec!["convert", "delta", s(&table), "-o", s(&out), "--resume"];
    args.extend_from_slice(&size);
    let killed = crate::tfshard()
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "shard:journaled=exit@2")
        .output()
        .unwrap();
    assert!(!killed.status.success());
    // A commit lands between the kill and the rerun.
    let status = std::process::Command::new(python().unwrap())
        .arg("-c")
        .arg(
            "import sys, pyarrow as pa; from deltalake import write_deltalake, DeltaTable; \
             t = DeltaTable(sys.argv[1]).to_pyarrow_table().slice(0, 5); \
             write_deltalake(sys.argv[1], t, mode='append')",
        )
        .arg(&table)
        .status()
        .unwrap();
    assert!(status.success());
    args.push("--json");
    let (code, stdout, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["table"]["version"], 4, "{stdout}");
    assert!(
        summary["reused"]["shards"].as_u64().unwrap() >= 2,
        "{stdout}"
    );
    assert_eq!(
        records_in_order(&out, "data"),
        records_in_order(&whole, "data")
    );
    // Without --resume the latest is read: the new commit.
    let (code, stdout, err) = convert(&table, &scratch("delta-resume-latest"), &["--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("\"version\":5"), "{stdout}");
}

#[test]
fn a_table_with_no_commit_yet_converts_to_no_rows() {
    let table = scratch("delta-no-commit");
    let _ = std::fs::remove_dir_all(&table);
    std::fs::create_dir_all(table.join("_delta_log")).unwrap();
    let out = scratch("delta-no-commit-out");
    let (code, stdout, err) = convert(&table, &out, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["records"], 0);
    assert_eq!(summary["table"]["version"], Value::Null);
    let (code, _, err) = run(["verify", s(&out)]);
    assert_eq!(code, 0, "{err}");
    fails(&table, &["--version", "0"], "");
}

#[test]
fn compression_index_and_tfds_work_as_for_parquet() {
    let (dir, expected) = need_tables!();
    let events = dir.join("events");
    let want = snapshot(expected, "events", 4)["records"]
        .as_array()
        .unwrap()
        .len();
    for (name, flags) in [
        ("gzip", &["--compression", "gzip"][..]),
        ("index", &["--index"][..]),
    ] {
        let out = scratch(&format!("delta-{name}"));
        let (code, stdout, err) = convert(&events, &out, &[flags, &["--json"]].concat());
        assert_eq!(code, 0, "{name}: {err}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["records"], want, "{name}");
        let (code, _, err) = run(["verify", s(&out)]);
        assert_eq!(code, 0, "{name}: {err}");
    }
    let out = scratch("delta-tfds");
    let (code, _, err) = convert(&events, &out, &["--tfds", "events", "--exclude", "tags"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.join("events/1.0.0/dataset_info.json").exists());
}

/// One line (and a hint where one helps), exit 1, nothing published.
fn fails(table: &Path, extra: &[&str], needle: &str) {
    crate::table_refuses("delta", table, extra, needle);
}
