//! Hive-partitioned tables and table formats on disk.

use std::path::Path;

use serde_json::Value;

use crate::{root, run, scratch};

/// Every record of a shard folder, as `inspect` prints it.
fn records(dir: &Path) -> Vec<Value> {
    let (code, out, err) = run([
        "inspect".as_ref(),
        dir.as_os_str(),
        "--limit".as_ref(),
        "1000".as_ref(),
    ]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The rows pyarrow's dataset reader gives (scripts/make_hive_table.py), as the
/// records tfshard should write: a null partition value is an absent feature.
fn expected(filter: impl Fn(&Value) -> bool) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("testdata/hive.expected.json")).unwrap();
    let rows: Vec<Value> = serde_json::from_str(&text).unwrap();
    rows.into_iter()
        .filter(|r| filter(r))
        .map(|r| {
            let mut o = serde_json::Map::new();
            o.insert("id".into(), serde_json::json!({"int64": [r["id"]]}));
            o.insert("name".into(), serde_json::json!({"bytes": [r["name"]]}));
            o.insert("value".into(), serde_json::json!({"float": [r["value"]]}));
            o.insert("city".into(), serde_json::json!({"bytes": [r["city"]]}));
            if !r["year"].is_null() {
                o.insert("year".into(), serde_json::json!({"int64": [r["year"]]}));
            }
            Value::Object(o)
        })
        .collect()
}

#[test]
fn hive_keys_become_features_with_pyarrows_values() {
    let out = scratch("hive-all");
    let table = root().join("testdata/hive");
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        table.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out), expected(|_| true));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("data.manifest.json")).unwrap()).unwrap();
    let features = manifest["features"].as_array().unwrap();
    let year = features.iter().find(|f| f["name"] == "year").unwrap();
    assert_eq!(year["kind"], "int64");
    assert_eq!(year["partition"], true);
    assert!(year.get("arrow_type").is_none());
    let city = features.iter().find(|f| f["name"] == "city").unwrap();
    assert_eq!(city["kind"], "bytes");
}

#[test]
fn partition_base_keeps_the_keys_of_an_input_inside_the_table() {
    let out = scratch("hive-base");
    let table = root().join("testdata/hive");
    let inside = table.join("year=2021");
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        inside.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--partition-base".as_ref(),
        table.as_os_str(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(records(&out), expected(|r| r["year"] == 2021));
    // Without the base, only `city` (below the input folder) is a key.
    let out2 = scratch("hive-no-base");
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        inside.as_os_str(),
        "-o".as_ref(),
        out2.as_os_str(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(records(&out2)
        .iter()
        .all(|r| r.get("year").is_none() && r.get("city").is_some()));
    // A base that does not hold the input is a usage error.
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        inside.as_os_str(),
        "-o".as_ref(),
        scratch("hive-bad-base").as_os_str(),
        "--partition-base".as_ref(),
        root().join("testdata/golden").as_os_str(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not inside the partition base"), "{err}");
}

#[test]
fn partitioning_modes_and_key_column_clash() {
    let table = root().join("testdata/hive");
    let out = scratch("hive-none");
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        table.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--partitioning".as_ref(),
        "none".as_ref(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(records(&out)
        .iter()
        .all(|r| r.get("year").is_none() && r.get("city").is_none()));

    // --partitioning hive on a folder without keys: exit 1 naming the file.
    let plain = scratch("hive-plain-in");
    std::fs::copy(
        root().join("testdata/small.parquet"),
        plain.join("a.parquet"),
    )
    .unwrap();
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        plain.as_os_str(),
        "-o".as_ref(),
        scratch("hive-plain-out").as_os_str(),
        "--partitioning".as_ref(),
        "hive".as_ref(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("a.parquet") && err.contains("partition"),
        "{err}"
    );

    // A key that is also a column: exit 1 naming the key.
    let clash = scratch("hive-clash-in");
    std::fs::create_dir_all(clash.join("id=3")).unwrap();
    std::fs::copy(
        root().join("testdata/small.parquet"),
        clash.join("id=3/a.parquet"),
    )
    .unwrap();
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        clash.as_os_str(),
        "-o".as_ref(),
        scratch("hive-clash-out").as_os_str(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("partition key \"id\" is also a column"),
        "{err}"
    );
}

#[test]
fn delta_and_iceberg_folders_are_refused() {
    let delta = root().join("testdata/delta-table");
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        delta.as_os_str(),
        "-o".as_ref(),
        scratch("delta-out").as_os_str(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("delta-table") && err.contains("tfshard convert delta"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let iceberg = scratch("iceberg-in");
    std::fs::create_dir_all(iceberg.join("metadata")).unwrap();
    std::fs::create_dir_all(iceberg.join("data")).unwrap();
    std::fs::write(iceberg.join("metadata/v1.metadata.json"), "{}").unwrap();
    std::fs::copy(
        root().join("testdata/small.parquet"),
        iceberg.join("data/a.parquet"),
    )
    .unwrap();
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        iceberg.as_os_str(),
        "-o".as_ref(),
        scratch("iceberg-out").as_os_str(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tfshard convert iceberg"), "{err}");
    // A file inside the table: refused as well.
    let (code, _, err) = run([
        "convert".as_ref(),
        "parquet".as_ref(),
        iceberg.join("data/a.parquet").as_os_str(),
        "-o".as_ref(),
        scratch("iceberg-out").as_os_str(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tfshard convert iceberg"), "{err}");
}

#[test]
fn an_unknown_url_scheme_is_a_usage_error_not_a_folder() {
    let (code, _, err) = run(["convert", "parquet", "hdfs://nn/table", "-o", "s3x://b/out"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unsupported scheme"), "{err}");
    assert!(!Path::new("s3x:").exists() && !Path::new("hdfs:").exists());
}
