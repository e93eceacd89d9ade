//! The integration tests: one binary (each extra one relinks arrow), one module per area.

mod append;
mod cache;
mod convert;
mod delta;
mod docs;
mod encode;
mod gcs;
mod golden;
mod hive;
mod iceberg;
mod images;
mod inspect_schema;
mod lifecycle;
mod pipeline;
mod resume;
mod roundtrip;
mod shuffle;
mod stats;
mod store;
mod tfds;
mod tfrecord_in;
mod verify;
mod workers;

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `testdata/golden/NAME`.
pub fn golden(name: &str) -> PathBuf {
    root().join("testdata/golden").join(name)
}

/// A fresh, empty scratch folder under `target/`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = root().join("target/test-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch folder");
    dir
}

/// Waits until a run started with `TFSHARD_FAILPOINTS=POINT=wait:GATE` reaches its
/// point (it creates `GATE.reached`). Panics, naming `what`, when the run ends first or
/// never gets there (a guard against a hung test, not a timing check).
pub fn wait_for_failpoint(child: &mut std::process::Child, gate: &Path, what: &str) {
    let reached = gate.with_extension("reached");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !reached.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended ({status}) before {what}");
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the run never got to {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The binary, ready to run.
pub fn tfshard() -> Command {
    Command::cargo_bin("tfshard").expect("the binary is built")
}

/// Runs the binary with `args`; returns (exit code, stdout, stderr).
pub fn run<I, S>(args: I) -> (i32, String, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let Output {
        status,
        stdout,
        stderr,
    } = tfshard().args(args).output().expect("run tfshard");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// `tfshard convert parquet INPUT -o OUT EXTRA...`; returns (exit code, stdout, stderr).
pub fn convert_parquet(input: &Path, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", "parquet", s(input), "-o", s(out)];
    args.extend_from_slice(extra);
    run(args)
}

/// The manifest `{prefix}.manifest.json` in `dir`, parsed.
pub fn read_manifest(dir: &Path, prefix: &str) -> serde_json::Value {
    let path = dir.join(format!("{prefix}.manifest.json"));
    serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("a manifest is JSON")
}

/// The `kind` and `shape` of feature `name` in the `data` manifest in `dir`.
pub fn feature_shape(dir: &Path, name: &str) -> (serde_json::Value, serde_json::Value) {
    let manifest = read_manifest(dir, "data");
    let features = manifest["features"].as_array().unwrap();
    let feature = features.iter().find(|f| f["name"] == name).unwrap();
    (feature["kind"].clone(), feature["shape"].clone())
}

/// Checks the `sources` of a manifest written in input order (one output, no shuffle):
/// each shard's ranges hold exactly its records, and the shards' ranges, in order, run
/// through every input's records once, from 0 to its `rows`, in the order the inputs
/// are listed. Returns each shard's sources as `(input, start, end)`.
pub fn in_order_sources(manifest: &serde_json::Value) -> Vec<Vec<(String, u64, u64)>> {
    let mut per_shard = Vec::new();
    let mut covered: Vec<(String, u64, u64)> = Vec::new();
    for shard in manifest["shards"].as_array().unwrap() {
        let sources: Vec<(String, u64, u64)> = shard["sources"]
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let rows = s["rows"].as_array().unwrap();
                let (a, b) = (rows[0].as_u64().unwrap(), rows[1].as_u64().unwrap());
                (s["input"].as_str().unwrap().to_owned(), a, b)
            })
            .collect();
        let held: u64 = sources.iter().map(|(_, a, b)| b - a).sum();
        assert_eq!(held, shard["records"].as_u64().unwrap(), "{shard}");
        for (input, a, b) in &sources {
            match covered.last_mut() {
                Some((last, _, end)) if last == input => {
                    assert_eq!(end, a, "{input}: a gap or an overlap");
                    *end = *b;
                }
                _ => {
                    assert_eq!(*a, 0, "{input} does not start at its first record");
                    covered.push((input.clone(), *a, *b));
                }
            }
        }
        per_shard.push(sources);
    }
    let expected: Vec<(String, u64, u64)> = manifest["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["rows"].as_u64().unwrap() > 0)
        .map(|i| {
            (
                i["path"].as_str().unwrap().to_owned(),
                0,
                i["rows"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(covered, expected, "the shards' sources cover the inputs");
    per_shard
}

/// `path` as a `&str` for argument lists.
pub fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 test path")
}

/// Every file of an output folder but its manifests, by name, with its bytes.
pub fn shard_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .filter(|(n, _)| !n.ends_with(".manifest.json"))
        .collect();
    out.sort();
    out
}

/// The shards a manifest lists, concatenated in its order: for plain TFRecord, every
/// framed record of the set, in order, whatever the shard boundaries.
pub fn records_in_order(dir: &Path, prefix: &str) -> Vec<u8> {
    let path = dir.join(format!("{prefix}.manifest.json"));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut all = Vec::new();
    for s in m["shards"].as_array().unwrap() {
        all.extend(std::fs::read(dir.join(s["file"].as_str().unwrap())).unwrap());
    }
    all
}

/// Every record of a shard folder, in order, as `inspect` prints it.
pub fn inspect_all(dir: &Path) -> Vec<serde_json::Value> {
    let manifest = read_manifest(dir, "data");
    let mut out = Vec::new();
    for shard in manifest["shards"].as_array().unwrap() {
        let file = dir.join(shard["file"].as_str().unwrap());
        let (code, stdout, err) = run(["inspect", s(&file), "--limit", "100000"]);
        assert_eq!(code, 0, "{err}");
        out.extend(
            stdout
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()),
        );
    }
    out
}

/// A copy of the folder `from` as scratch folder `name` (the tests that break a table
/// break their own).
pub fn copy_tree(from: &Path, name: &str) -> PathBuf {
    let to = scratch(name);
    let _ = std::fs::remove_dir_all(&to);
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(from).unwrap();
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(to.join(rel)).unwrap();
        } else {
            std::fs::copy(entry.path(), to.join(rel)).unwrap();
        }
    }
    to
}

/// `convert KIND TABLE` with `extra` fails as bad data: exit 1, one line holding
/// `needle` (and a hint where one helps), nothing published.
pub fn table_refuses(kind: &str, table: &Path, extra: &[&str], needle: &str) {
    let out = scratch(&format!("{kind}-fails"));
    let _ = std::fs::remove_dir_all(&out);
    let mut args = vec!["convert", kind, s(table), "-o", s(&out), "--overwrite"];
    args.extend_from_slice(extra);
    let (code, _, err) = run(args);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.lines().next().unwrap().contains(needle),
        "{needle:?} not in {err}"
    );
    assert!(
        err.lines().skip(1).all(|l| l.starts_with("hint: ")),
        "{err}"
    );
    assert!(err.lines().count() <= 2, "{err}");
    assert!(!out.join("data.manifest.json").exists());
}
