//! Apache Iceberg tables: tables written here by pyiceberg (appends, a
//! copy-on-write delete, a renamed, an added and a dropped column, identity and day
//! partitions, a data file without its partition column, position and equality delete
//! files, format v1, a table without a snapshot), with the rows pyiceberg's own reader
//! returns as the expected records (scripts/iceberg_tables.py); errors; workers.
//!
//! Without `.venv-iceberg` (scripts/iceberg_venv.sh) these tests say they were skipped;
//! `.ci/run` installs it and sets `TFSHARD_REQUIRE_SERVERS=1`, so there a missing venv
//! fails.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::{
    copy_tree as copy_table, feature_shape, inspect_all as records, read_manifest,
    records_in_order, root, run, s, scratch,
};

/// The pyiceberg venv's python: `TFSHARD_ICEBERG_VENV`, else `.venv-iceberg`.
pub(crate) fn python() -> Option<PathBuf> {
    let dir = std::env::var_os("TFSHARD_ICEBERG_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-iceberg"));
    let python = dir.join("bin/python");
    if python.exists() {
        return Some(python);
    }
    if std::env::var_os("TFSHARD_REQUIRE_SERVERS").is_some() {
        panic!(
            "TFSHARD_REQUIRE_SERVERS is set but .venv-iceberg is missing (scripts/iceberg_venv.sh)"
        );
    }
    None
}

/// Runs scripts/iceberg_tables.py into `dir` with `extra` arguments; its expected.json.
pub(crate) fn write_tables(python: &Path, dir: &Path, extra: &[&str]) -> Value {
    let _ = std::fs::remove_dir_all(dir);
    let out = std::process::Command::new(python)
        .arg(root().join("scripts/iceberg_tables.py"))
        .arg(dir)
        .args(extra)
        .output()
        .expect("run scripts/iceberg_tables.py");
    assert!(
        out.status.success(),
        "iceberg_tables.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap()
}

/// The folder scripts/iceberg_tables.py wrote once for every test, and its expected.json.
pub(crate) fn tables() -> Option<&'static (PathBuf, Value)> {
    static TABLES: OnceLock<Option<(PathBuf, Value)>> = OnceLock::new();
    TABLES
        .get_or_init(|| {
            let python = python()?;
            let dir = scratch("iceberg-tables");
            let expected = write_tables(&python, &dir, &[]);
            Some((dir, expected))
        })
        .as_ref()
}

macro_rules! need_tables {
    () => {
        match tables() {
            Some(t) => t,
            None => {
                eprintln!("skipped: no pyiceberg venv (run scripts/iceberg_venv.sh)");
                return;
            }
        }
    };
}

/// A table's folder: where the catalog put it.
pub(crate) fn table_dir(expected: &Value, table: &str) -> PathBuf {
    let location = expected["locations"][table].as_str().unwrap();
    PathBuf::from(location.strip_prefix("file://").unwrap_or(location))
}

fn convert(table: &Path, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", "iceberg", s(table), "-o", s(out), "--overwrite"];
    args.extend_from_slice(extra);
    run(args)
}

pub(crate) fn id_of(snapshot: &Value) -> String {
    snapshot["snapshot_id"].as_i64().unwrap().to_string()
}

fn rfc3339(ms: i64) -> String {
    tfshard::convert::rfc3339_ms(ms)
}

/// Converting `table` at each of its snapshots gives pyiceberg's rows in the contract's
/// order, and the manifest names the snapshot, its metadata file, data and delete files.
fn every_snapshot_converts(dir_of: &Path, table: &str, snapshots: &Value, name: &str) {
    for (i, want) in snapshots.as_array().unwrap().iter().enumerate() {
        let out = scratch(&format!("iceberg-{name}-s{i}"));
        let id = id_of(want);
        let (code, stdout, err) = convert(dir_of, &out, &["--snapshot-id", &id, "--json"]);
        assert_eq!(code, 0, "{table} s{i}: {err}");
        assert_eq!(
            records(&out),
            want["records"].as_array().unwrap().clone(),
            "{table} at snapshot {i}"
        );
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        let manifest = read_manifest(&out, "data");
        // A data file's rows as its delete files leave them.
        crate::in_order_sources(&manifest);
        let when = rfc3339(want["timestamp_ms"].as_i64().unwrap());
        for t in [&summary["table"], &manifest["table"]] {
            assert_eq!(t["format"], "iceberg");
            assert_eq!(t["snapshot_id"], want["snapshot_id"]);
            assert_eq!(t["timestamp"], when.as_str());
            assert!(t.get("version").is_none(), "{t}");
        }
        let inputs = manifest["inputs"].as_array().unwrap();
        assert!(
            inputs[0]["path"]
                .as_str()
                .unwrap()
                .ends_with(".metadata.json"),
            "{inputs:?}"
        );
        let location = manifest["table"]["location"].as_str().unwrap().to_owned();
        let paths: Vec<String> = inputs[1..]
            .iter()
            .map(|i| i["path"].as_str().unwrap().to_owned())
            .collect();
        let listed = |key: &str| -> Vec<String> {
            want[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| format!("{location}/{}", f.as_str().unwrap()))
                .collect()
        };
        assert_eq!(paths, [listed("files"), listed("deletes")].concat());
        let rows: u64 = inputs.iter().map(|i| i["rows"].as_u64().unwrap()).sum();
        assert_eq!(rows, want["records"].as_array().unwrap().len() as u64);
    }
}

#[test]
fn every_snapshot_converts_to_pyicebergs_rows_in_file_order() {
    let (_, expected) = need_tables!();
    for table in ["events", "deletes", "v1", "embeddings"] {
        every_snapshot_converts(&table_dir(expected, table), table, &expected[table], table);
    }
    // The current snapshot by default: the last one.
    let events = table_dir(expected, "events");
    let last = &expected["events"][4];
    let out = scratch("iceberg-events-current");
    let (code, stdout, err) = convert(&events, &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains(&format!("at snapshot {}", id_of(last))),
        "{stdout}"
    );
    assert_eq!(records(&out), last["records"].as_array().unwrap().clone());
    // One metadata file named: that file's current snapshot (an earlier one here).
    let metadata = events.join("metadata");
    let mut names: Vec<String> = std::fs::read_dir(&metadata)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    names.sort();
    let third = metadata.join(&names[3]);
    let (code, stdout, err) = convert(&third, &out, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["table"]["snapshot_id"],
        expected["events"][2]["snapshot_id"]
    );
    assert_eq!(summary["table"]["location"], s(&events));
}

/// A table pyiceberg created from pyarrow's `fixed_size_list<float>[32]` (Iceberg
/// records `list<float>`) converts with the list's length as the spec's fixed shape.
#[test]
fn a_fixed_size_list_column_keeps_its_shape() {
    let (_, expected) = need_tables!();
    let out = scratch("iceberg-embeddings-shape");
    let (code, _, err) = convert(&table_dir(expected, "embeddings"), &out, &[]);
    assert_eq!(code, 0, "{err}");
    let want = &expected["embeddings"][1];
    assert_eq!(records(&out), want["records"].as_array().unwrap().clone());
    assert_eq!(feature_shape(&out, "emb"), (json!("float"), json!([32])));
}

#[test]
fn a_table_without_a_snapshot_converts_to_the_zero_row_output() {
    let (_, expected) = need_tables!();
    let out = scratch("iceberg-empty");
    let (code, stdout, err) = convert(&table_dir(expected, "empty"), &out, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["records"], 0);
    assert_eq!(summary["table"]["snapshot_id"], Value::Null);
    assert_eq!(
        read_manifest(&out, "data")["shards"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_copied_table_reads_from_where_it_is_now() {
    let (_, expected) = need_tables!();
    let copy = copy_table(&table_dir(expected, "deletes"), "iceberg-moved/deletes");
    let out = scratch("iceberg-moved-out");
    let (code, _, err) = convert(&copy, &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        records(&out),
        expected["deletes"][4]["records"]
            .as_array()
            .unwrap()
            .clone()
    );
    let manifest = read_manifest(&out, "data");
    assert!(
        manifest["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["path"].as_str().unwrap().starts_with(s(&copy))),
        "{manifest}"
    );
}

#[test]
fn timestamps_name_the_snapshot_current_then() {
    let (_, expected) = need_tables!();
    let events = table_dir(expected, "events");
    let at = |i: usize| expected["events"][i]["timestamp_ms"].as_i64().unwrap();
    for (t, i) in [
        (rfc3339(at(2)), 2usize),
        (rfc3339(at(3) - 1), 2),
        (rfc3339(at(0)), 0),
        ("2999-01-01T00:00:00+01:00".to_owned(), 4),
    ] {
        let out = scratch("iceberg-timestamp");
        let (code, stdout, err) = convert(&events, &out, &["--timestamp", &t, "--json"]);
        assert_eq!(code, 0, "{t}: {err}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            summary["table"]["snapshot_id"], expected["events"][i]["snapshot_id"],
            "{t}"
        );
    }
    let out = scratch("iceberg-timestamp-early");
    let early = rfc3339(at(0) - 1000);
    let (code, _, err) = convert(&events, &out, &["--timestamp", &early]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("before the first snapshot"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, _, err) = convert(&events, &out, &["--timestamp", "yesterday"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = convert(
        &events,
        &out,
        &["--timestamp", &early, "--snapshot-id", "1"],
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = convert(&events, &out, &["--version", "1"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn one_snapshot_gives_the_same_bytes_at_any_thread_count() {
    let (_, expected) = need_tables!();
    let table = table_dir(expected, "deletes");
    let mut outputs = Vec::new();
    for threads in ["1", "2", "3"] {
        let out = scratch(&format!("iceberg-threads-{threads}"));
        let (code, _, err) = convert(
            &table,
            &out,
            &["--threads", threads, "--target-shard-size", "1KiB"],
        );
        assert_eq!(code, 0, "{err}");
        outputs.push(crate::shard_files(&out));
    }
    assert!(outputs[0].len() > 2, "several shards");
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], outputs[2]);
}

#[test]
fn workers_name_the_snapshot_and_finalize_equals_one_machine() {
    let (_, expected) = need_tables!();
    let events = table_dir(expected, "events");
    let id = id_of(&expected["events"][4]);
    let out = scratch("iceberg-workers");
    let _ = std::fs::remove_dir_all(&out);
    let worker = |table: &Path, out: &Path, id: Option<&str>, n: &str, i: &str, extra: &[&str]| {
        let mut args = vec![
            "convert",
            "iceberg",
            s(table),
            "-o",
            s(out),
            "--num-workers",
            n,
            "--worker-index",
            i,
            "--target-shard-size",
            "8KiB",
        ];
        if let Some(id) = id {
            args.extend(["--snapshot-id", id]);
        }
        args.extend_from_slice(extra);
        run(args)
    };
    let (code, _, err) = worker(&events, &out, None, "2", "0", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--snapshot-id"), "{err}");
    for i in ["0", "1", "2"] {
        let (code, _, err) = worker(&events, &out, Some(&id), "3", i, &[]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let one = scratch("iceberg-workers-one");
    let (code, _, err) = convert(
        &events,
        &one,
        &["--snapshot-id", &id, "--target-shard-size", "8KiB"],
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

    // Parts of two snapshots: refused, naming both.
    let mixed = scratch("iceberg-workers-mixed");
    let _ = std::fs::remove_dir_all(&mixed);
    let older = id_of(&expected["events"][3]);
    for (i, id) in [("0", older.as_str()), ("1", id.as_str())] {
        let (code, _, err) = worker(&events, &mixed, Some(id), "2", i, &[]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize", s(&mixed)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("snapshot {id}")) && err.contains(&format!("snapshot {older}")),
        "{err}"
    );
    assert!(!mixed.join("data.manifest.json").exists());

    // A position split over a snapshot with delete files: the records before a share
    // are not known: refused, with what to do.
    let deletes = table_dir(expected, "deletes");
    let snapshot = id_of(&expected["deletes"][4]);
    let split = scratch("iceberg-workers-split");
    let halves = ["--split", "train=0.5,test=0.5"];
    let (code, _, err) = worker(&deletes, &split, Some(&snapshot), "2", "1", &halves);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--split-key"), "{err}");

    // Without a split, workers convert it; finalized, each data file's ranges run through
    // its records after deletes once, as one machine's do.
    let parts = scratch("iceberg-workers-deletes");
    let _ = std::fs::remove_dir_all(&parts);
    for i in ["0", "1", "2"] {
        let (code, _, err) = worker(&deletes, &parts, Some(&snapshot), "3", i, &[]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = run(["finalize", s(&parts)]);
    assert_eq!(code, 0, "{err}");
    crate::in_order_sources(&read_manifest(&parts, "data"));
    let one = scratch("iceberg-workers-deletes-one");
    let (code, _, err) = convert(
        &deletes,
        &one,
        &["--snapshot-id", &snapshot, "--target-shard-size", "8KiB"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        records_in_order(&parts, "data"),
        records_in_order(&one, "data")
    );
}

#[test]
fn partition_filters_keep_those_files_and_columns_select() {
    let (_, expected) = need_tables!();
    let events = table_dir(expected, "events");
    let all = expected["events"][4]["records"].as_array().unwrap();
    let out = scratch("iceberg-filter");
    let (code, _, err) = convert(
        &events,
        &out,
        &[
            "--partition-filter",
            "region=eu west",
            "--partition-filter",
            "day_day=2026-11-29",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let want: Vec<Value> = all
        .iter()
        .filter(|r| r["region"]["bytes"][0] == "eu west" && r["day"]["int64"][0] == 20786)
        .cloned()
        .collect();
    assert!(!want.is_empty());
    assert_eq!(records(&out), want);
    assert_eq!(
        read_manifest(&out, "data")["options"]["partition_filter"],
        serde_json::json!(["region=eu west", "day_day=2026-11-29"])
    );
    // The identity field's value that only the manifest holds.
    let (code, _, err) = convert(&events, &out, &["--partition-filter", "region=apac"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out).len(), 6);
    let (code, _, err) = convert(&events, &out, &["--partition-filter", "name=row-1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no partition field"), "{err}");

    // Columns by their current names; a renamed column keeps its values.
    let (code, _, err) = convert(
        &events,
        &out,
        &["--columns", "id,amount,region", "--rename", "amount=value"],
    );
    assert_eq!(code, 0, "{err}");
    let got = records(&out);
    assert_eq!(got.len(), all.len());
    for (g, w) in got.iter().zip(all) {
        assert_eq!(g["value"], w["amount"]);
        assert_eq!(g["region"], w["region"]);
        assert_eq!(g.as_object().unwrap().len(), 3, "{g}");
    }
}

#[test]
fn parquet_refuses_the_table_and_its_folders() {
    let (_, expected) = need_tables!();
    let events = table_dir(expected, "events");
    for input in [events.clone(), events.join("data")] {
        let out = scratch("iceberg-as-parquet");
        let (code, _, err) = run(["convert", "parquet", s(&input), "-o", s(&out)]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("tfshard convert iceberg"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// The newest `*.metadata.json` of a table folder.
fn newest_metadata(table: &Path) -> PathBuf {
    let mut names: Vec<PathBuf> = std::fs::read_dir(table.join("metadata"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .collect();
    names.sort();
    names.pop().unwrap()
}

#[test]
fn broken_tables_are_one_line_and_publish_nothing() {
    let (_, expected) = need_tables!();
    let events = table_dir(expected, "events");

    let not_json = copy_table(&events, "iceberg-broken/not-json");
    std::fs::write(newest_metadata(&not_json), b"{\"format-version\":2, oops").unwrap();
    fails(&not_json, &[], "is not JSON");

    let v3 = copy_table(&events, "iceberg-broken/v3");
    let file = newest_metadata(&v3);
    let text = std::fs::read_to_string(&file).unwrap();
    let (key, three) = ("\"format-version\":2", "\"format-version\":3");
    assert!(text.contains(key), "{text}");
    std::fs::write(&file, text.replacen(key, three, 1)).unwrap();
    fails(&v3, &[], "format version 3 is not supported");

    let no_list = copy_table(&events, "iceberg-broken/no-manifest-list");
    for entry in std::fs::read_dir(no_list.join("metadata")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("snap-")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    fails(&no_list, &[], "snap-");

    fails(
        &events,
        &["--snapshot-id", "12345"],
        "snapshot 12345 does not exist",
    );

    let missing = copy_table(&events, "iceberg-broken/missing-data");
    let rel = expected["events"][4]["files"][3].as_str().unwrap();
    std::fs::remove_file(missing.join(rel)).unwrap();
    let snapshot = id_of(&expected["events"][4]);
    fails(
        &missing,
        &[],
        &format!("data file {rel} is named by snapshot {snapshot} but is missing"),
    );
    // An unreadable version hint is no hint: the newest metadata file.
    let hinted = copy_table(&events, "iceberg-broken/bad-hint");
    std::fs::write(hinted.join("metadata/version-hint.text"), [0xff, 0xfe]).unwrap();
    let out = scratch("iceberg-broken/bad-hint-out");
    let (code, _, err) = convert(&hinted, &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        records(&out),
        expected["events"][4]["records"].as_array().unwrap().clone()
    );

    let not_table = scratch("iceberg-broken/not-a-table");
    std::fs::create_dir_all(&not_table).unwrap();
    fails(&not_table, &[], "not an Iceberg table");
}

#[test]
fn verify_deep_accepts_a_converted_snapshot() {
    // TensorFlow itself reads converted snapshots in .ci/run's interop check
    // (scripts/tf_interop.py); here `verify --deep` parses every record against the
    // manifest's schema.
    let (_, expected) = need_tables!();
    let out = scratch("iceberg-verify");
    let (code, _, err) = convert(&table_dir(expected, "events"), &out, &[]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(["verify", s(&out), "--deep"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn resume_continues_the_snapshot_the_interrupted_run_read() {
    let (_, expected) = need_tables!();
    let table = copy_table(&table_dir(expected, "events"), "iceberg-resume-table");
    // The last commit held back: the table's current snapshot is the one before it.
    let newest = newest_metadata(&table);
    let held = scratch("iceberg-resume-held").join("held.metadata.json");
    std::fs::rename(&newest, &held).unwrap();
    let size = ["--target-shard-size", "2KiB"];
    let whole = scratch("iceberg-resume-whole");
    let (code, _, err) = convert(&table, &whole, &size);
    assert_eq!(code, 0, "{err}");
    let out = scratch("iceberg-resume");
    let _ = std::fs::remove_dir_all(&out);
    let mut args = vec!["convert", "iceberg", s(&table), "-o", s(&out), "--resume"];
    args.extend_from_slice(&size);
    let killed = crate::tfshard()
        .args(&args)
        .env("TFSHARD_FAILPOINTS", "shard:journaled=exit@2")
        .output()
        .unwrap();
    assert!(!killed.status.success());
    // The commit lands between the kill and the rerun.
    std::fs::rename(&held, &newest).unwrap();
    args.push("--json");
    let (code, stdout, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["table"]["snapshot_id"], expected["events"][3]["snapshot_id"],
        "{stdout}"
    );
    assert!(
        summary["reused"]["shards"].as_u64().unwrap() >= 2,
        "{stdout}"
    );
    assert_eq!(
        records_in_order(&out, "data"),
        records_in_order(&whole, "data")
    );
    // Without --resume the current snapshot is read: the new one.
    let (code, stdout, err) = convert(&table, &scratch("iceberg-resume-current"), &["--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["table"]["snapshot_id"],
        expected["events"][4]["snapshot_id"]
    );
}

/// The table the repo ships (testdata/iceberg-table: scripts/iceberg_tables.py's
/// `events`, written under /tmp/tfshard-iceberg and read where it is now), each
/// snapshot to the rows pyiceberg read then: no venv needed.
#[test]
fn the_shipped_table_converts_to_its_recorded_rows() {
    let table = root().join("testdata/iceberg-table");
    let expected: Value = serde_json::from_slice(
        &std::fs::read(root().join("testdata/iceberg-table.expected.json")).unwrap(),
    )
    .unwrap();
    every_snapshot_converts(&table, "iceberg-table", &expected["snapshots"], "shipped");
}

/// One line (and a hint where one helps), exit 1, nothing published.
fn fails(table: &Path, extra: &[&str], needle: &str) {
    crate::table_refuses("iceberg", table, extra, needle);
}
