//! `verify`: a corruption corpus built from a clean converted folder. Each corruption is
//! found at the right place with exit 1; clean folders and TensorFlow's files pass.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tfshard::tfrecord as frame;

use crate::{golden, root, run, s, scratch, wait_for_failpoint};

/// A clean folder: the shipped table in 5 plain shards (or gzip).
fn clean(name: &str, extra: &[&str]) -> PathBuf {
    let dir = scratch(name);
    let input = root().join("testdata/small.parquet");
    let mut args = vec![
        "convert",
        "parquet",
        s(&input),
        "-o",
        s(&dir),
        "--target-shard-size",
        "100KB",
        "--quiet",
    ];
    args.extend(extra);
    let (code, _, err) = run(args);
    assert_eq!(code, 0, "{err}");
    dir
}

fn verify_json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", "--json"];
    all.extend(args);
    let (code, out, err) = run(all);
    assert!(!err.contains("panicked"), "{err}");
    (
        code,
        serde_json::from_str(&out).unwrap_or_else(|_| panic!("not JSON: {out} {err}")),
    )
}

fn problems(report: &Value) -> Vec<(String, Option<u64>, Option<u64>, String)> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            // `kind` names the problem's phrase in snake case, beside it (a key added to
            // the report: scripts match on it instead of on text).
            let text = p["problem"].as_str().unwrap();
            let kind = p["kind"].as_str().unwrap_or_else(|| panic!("no kind: {p}"));
            let phrase = match kind {
                "unreadable" => "cannot read".to_owned(),
                k => k.replace('_', " "),
            };
            assert!(text.to_lowercase().starts_with(&phrase), "{p}");
            let file = Path::new(p["file"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (
                file,
                p["record"].as_u64(),
                p["offset"].as_u64(),
                p["problem"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

const SHARD: &str = "data-00001-of-00005.tfrecord";

/// (offset, framed length) of each record in a plain shard.
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        out.push((at, len + 16));
        at += len + 16;
    }
    out
}

#[test]
fn clean_folders_and_golden_files_pass() {
    for extra in [
        &[][..],
        &["--compression", "gzip"],
        &["--compression", "zlib"],
        &["--index"],
    ] {
        let dir = clean("verify_clean", extra);
        let (code, report) = verify_json(&[s(&dir), "--deep"]);
        assert_eq!(code, 0, "{extra:?}: {report}");
        assert_eq!(report["ok"], true);
        assert_eq!(report["records"], 2000);
        assert_eq!(report["shards"], report["shards"].as_u64().unwrap());
        for key in ["ok", "shards", "records", "bytes", "seconds", "problems"] {
            assert!(report.get(key).is_some(), "{key}");
        }
    }
    // A file:// URL names local files: read, mapped and checked in ranges as a path is.
    let dir = clean("verify_clean_url", &[]);
    let url = format!("file://{}", std::fs::canonicalize(&dir).unwrap().display());
    for deep in [&[][..], &["--deep"]] {
        let (code, report) = verify_json(&[&[url.as_str()][..], deep].concat());
        assert_eq!(code, 0, "{deep:?}: {report}");
        assert_eq!(report["records"], 2000, "{report}");
    }
    let (code, report) = verify_json(&[s(&golden(""))]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["shards"], 8);
    let (code, out, _) = run(["verify", s(&golden("examples.tfrecord"))]);
    assert_eq!(code, 0);
    assert!(out.trim().ends_with(": OK"), "{out}");
}

#[test]
fn a_flipped_bit_in_each_field_is_found_at_its_record() {
    let dir = clean("verify_flips", &[]);
    let path = dir.join(SHARD);
    let original = fs::read(&path).unwrap();
    let recs = records(&original);
    let (at, framed) = recs[7];
    for (field, byte, want) in [
        ("length", at + 1, "length CRC mismatch"),
        ("length CRC", at + 9, "length CRC mismatch"),
        ("data", at + 12 + 5, "data CRC mismatch"),
        ("data CRC", at + framed - 2, "data CRC mismatch"),
    ] {
        let mut bad = original.clone();
        bad[byte] ^= 0x04;
        fs::write(&path, &bad).unwrap();
        let (code, report) = verify_json(&[s(&dir)]);
        assert_eq!(code, 1, "{field}");
        let found = problems(&report);
        assert!(
            found.iter().any(|p| p.0 == SHARD
                && p.1 == Some(7)
                && p.2 == Some(at as u64)
                && p.3.starts_with(want)),
            "{field}: {found:?}"
        );
        assert!(
            found.iter().any(|p| p.3.starts_with("crc32c mismatch")),
            "{field}: {found:?}"
        );
        if want == "data CRC mismatch" {
            // The length was sane: the rest of the file is still read.
            assert_eq!(report["records"], 2000, "{field}");
        }
    }
    fs::write(&path, &original).unwrap();
}

#[test]
fn truncation_trailing_bytes_and_appended_records() {
    let dir = clean("verify_truncation", &[]);
    let path = dir.join(SHARD);
    let original = fs::read(&path).unwrap();
    let recs = records(&original);
    let (last, _) = *recs.last().unwrap();
    for (cut, want) in [
        (last + 5, "truncated length"),
        (last + 20, "truncated data"),
        (original.len() - 1, "truncated data"),
    ] {
        fs::write(&path, &original[..cut]).unwrap();
        let (code, report) = verify_json(&[s(&dir)]);
        assert_eq!(code, 1);
        let found = problems(&report);
        assert!(
            found.iter().any(|p| p.1 == Some(recs.len() as u64 - 1)
                && p.2 == Some(last as u64)
                && p.3.starts_with(want)),
            "cut at {cut}: {found:?}"
        );
        assert!(
            found.iter().any(|p| p.3.starts_with("size mismatch")),
            "{found:?}"
        );
    }
    // A few garbage bytes: TensorFlow's reader would accept them; we do not.
    let mut garbage = original.clone();
    garbage.extend_from_slice(b"junk");
    fs::write(&path, &garbage).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    let found = problems(&report);
    assert!(
        found
            .iter()
            .any(|p| p.2 == Some(original.len() as u64) && p.3.starts_with("truncated length")),
        "{found:?}"
    );
    // One valid record appended: framing is fine, the manifest is not.
    let mut appended = original.clone();
    frame::append_record(&mut appended, b"\n\x00");
    fs::write(&path, &appended).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    let kinds: Vec<String> = problems(&report)
        .into_iter()
        .map(|p| p.3.split(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["crc32c mismatch", "record count mismatch", "size mismatch"]
    );
    fs::write(&path, &original).unwrap();
}

#[test]
fn a_changed_byte_with_valid_framing_is_caught_by_the_file_crc() {
    let dir = clean("verify_reframed", &[]);
    let path = dir.join(SHARD);
    let original = fs::read(&path).unwrap();
    let (at, framed) = records(&original)[3];
    let mut payload = original[at + 12..at + framed - 4].to_vec();
    let last = payload.len() - 1;
    payload[last] ^= 0x01; // a different id character, same length
    let mut bad = original[..at].to_vec();
    frame::append_record(&mut bad, &payload);
    bad.extend_from_slice(&original[at + framed..]);
    fs::write(&path, &bad).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    let found = problems(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].3.starts_with("crc32c mismatch"), "{found:?}");
}

#[test]
fn missing_unlisted_and_manifest_problems() {
    let dir = clean("verify_manifest", &[]);
    fs::remove_file(dir.join("data-00003-of-00005.tfrecord")).unwrap();
    fs::copy(dir.join(SHARD), dir.join("data-00005-of-00006.tfrecord")).unwrap();
    fs::write(dir.join("notes.txt"), "not a shard").unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    let found = problems(&report);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].3.starts_with("missing shard") && found[0].0 == "data-00003-of-00005.tfrecord"
    );
    assert!(
        found[1].3.starts_with("unlisted shard") && found[1].0 == "data-00005-of-00006.tfrecord"
    );

    let dir = clean("verify_manifest_counts", &[]);
    let manifest_path = dir.join("data.manifest.json");
    let mut m: Value = serde_json::from_slice(&fs::read(&manifest_path).unwrap()).unwrap();
    m["shards"][2]["records"] = Value::from(1);
    m["records"] = Value::from(12345);
    fs::write(&manifest_path, serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, report) = verify_json(&["--manifest", s(&manifest_path)]);
    assert_eq!(code, 1);
    let kinds: Vec<(String, String)> = problems(&report)
        .into_iter()
        .map(|p| (p.0, p.3.split(':').next().unwrap().to_owned()))
        .collect();
    assert!(
        kinds.contains(&(
            "data-00002-of-00005.tfrecord".into(),
            "record count mismatch".into()
        )),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("data.manifest.json".into(), "record count mismatch".into())),
        "{kinds:?}"
    );

    // A manifest entry that climbs out of its folder is a problem and is never opened.
    m["shards"][0]["file"] = Value::from("../../../etc/passwd");
    fs::write(&manifest_path, serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    assert!(
        problems(&report)
            .iter()
            .any(|p| p.3.starts_with("unsafe path")),
        "{report}"
    );
}

#[test]
fn deep_checks_decode_and_schema() {
    let dir = clean("verify_deep", &[]);
    let manifest_path = dir.join("data.manifest.json");
    let mut m: Value = serde_json::from_slice(&fs::read(&manifest_path).unwrap()).unwrap();
    // Claim `y` is a float: every record disagrees.
    for f in m["features"].as_array_mut().unwrap() {
        if f["name"] == "y" {
            f["kind"] = Value::from("float");
        }
    }
    fs::write(&manifest_path, serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 0, "frames are fine: {report}");
    let (code, report) = verify_json(&[s(&dir), "--deep"]);
    assert_eq!(code, 1);
    let found = problems(&report);
    assert_eq!(found.len(), 2000);
    assert_eq!(
        found[0].3,
        "schema mismatch: feature \"y\" is int64, the schema says float"
    );

    // A record that frames fine but is not a protobuf message.
    let dir = scratch("verify_decode");
    let mut bytes = Vec::new();
    frame::append_record(&mut bytes, b"\n\x00");
    frame::append_record(&mut bytes, b"\xff\xff\xff");
    fs::write(dir.join("x.tfrecord"), &bytes).unwrap();
    let (code, _) = verify_json(&[s(&dir)]);
    assert_eq!(code, 0);
    let (code, report) = verify_json(&[s(&dir), "--deep"]);
    assert_eq!(code, 1);
    let found = problems(&report);
    assert_eq!((found[0].1, found[0].2), (Some(1), Some(18)));
    assert!(found[0].3.starts_with("decode error"), "{found:?}");
}

#[test]
fn compressed_shards_are_checked_through_the_stream() {
    let dir = clean(
        "verify_gzip",
        &["--compression", "gzip", "--max-records-per-shard", "300"],
    );
    let m: Value =
        serde_json::from_slice(&fs::read(dir.join("data.manifest.json")).unwrap()).unwrap();
    assert!(m["shards"].as_array().unwrap().len() > 2);
    let path = dir.join(m["shards"][1]["file"].as_str().unwrap());
    let original = fs::read(&path).unwrap();
    let mut cut = original.clone();
    cut.truncate(original.len() / 2);
    fs::write(&path, &cut).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    assert!(
        problems(&report)
            .iter()
            .any(|p| p.3.starts_with("truncated data")),
        "{report}"
    );
    let mut trailing = original.clone();
    trailing.extend_from_slice(b"garbage");
    fs::write(&path, &trailing).unwrap();
    let (code, report) = verify_json(&[s(&dir)]);
    assert_eq!(code, 1);
    assert!(
        problems(&report)
            .iter()
            .any(|p| p.3.starts_with("trailing bytes")),
        "{report}"
    );
}

#[test]
fn human_output_and_usage() {
    let dir = clean("verify_human", &[]);
    let (code, out, _) = run(["verify", s(&dir)]);
    assert_eq!(code, 0);
    assert!(out.starts_with("verified 5 shards, 2000 records"), "{out}");
    assert!(out.trim().ends_with("OK"));
    let (code, _, _) = run(["verify"]);
    assert_eq!(code, 2, "a path or --manifest is required");
    let (code, _, err) = run(["verify", "no/such/dir"]);
    assert_eq!(code, 1, "{err}");
}

/// A folder with no shard and no manifest (Ray Data names its TFRecord files
/// `*.tar`) is an error for every command that reads shards, never a green check of
/// nothing; the same files named one by one are read whatever their extension.
#[test]
fn a_folder_without_shards_is_an_error_not_an_empty_success() {
    let source = clean("no_shards_source", &[]);
    let dir = scratch("no_shards");
    let mut named = Vec::new();
    for entry in fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".tfrecord") {
            let tar = dir.join(name.replace(".tfrecord", ".tar"));
            fs::copy(&path, &tar).unwrap();
            named.push(tar);
        }
    }
    named.sort();
    for command in [
        vec!["verify"],
        vec!["schema"],
        vec!["bench", "--epochs", "1"],
        vec!["inspect"],
    ] {
        let mut args = command.clone();
        args.push(s(&dir));
        let (code, out, err) = run(&args);
        assert_eq!(code, 1, "{command:?}: {out} {err}");
        let line = err.lines().next().unwrap_or("");
        assert!(line.starts_with("error: "), "{command:?}: {err}");
        assert!(line.contains(s(&dir)), "{command:?}: {err}");
        assert!(
            line.contains("no shards in this folder"),
            "{command:?}: {err}"
        );
        assert!(line.contains("*.tfrecord.gz"), "{command:?}: {err}");
        assert!(out.is_empty(), "{command:?}: {out}");
    }
    let mut args = vec!["verify"];
    args.extend(named.iter().map(|p| s(p)));
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{out} {err}");
    let (code, out, err) = run(["inspect", s(&named[0]), "--limit", "1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1);
}

/// A verification takes a cancel token like every run.
#[test]
fn a_cancelled_verification_stops_with_interrupted() {
    let dir = clean("verify_cancel", &[]);
    let cancel = tfshard::CancelToken::new();
    let verifier = tfshard::Verifier::builder(vec![dir])
        .with_cancel(cancel.clone())
        .build()
        .unwrap();
    assert!(verifier.run(&tfshard::NoProgress).unwrap().ok);
    cancel.cancel();
    let err = verifier.run(&tfshard::NoProgress).unwrap_err();
    assert!(
        matches!(err.kind(), tfshard::ErrorKind::Interrupted),
        "{err}"
    );
}

/// A shard cut short while `verify` reads it ends in a clear problem naming
/// the file and the record, exit 1: `verify` reads with large reads, never through a
/// memory map (which would stop the process with SIGBUS).
#[test]
fn a_shard_truncated_while_verify_reads_it_is_a_clear_problem() {
    use std::process::Command;
    let dir = scratch("verify_truncated_meanwhile");
    let input = root().join("testdata/small.parquet");
    let (code, _, err) = run(["convert", "parquet", s(&input), "-o", s(&dir), "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let shard = dir.join("data-00000-of-00001.tfrecord");
    let original = fs::read(&shard).unwrap();
    for threads in ["1", "2"] {
        fs::write(&shard, &original).unwrap();
        let gate = scratch(&format!("verify_truncated_gate_{threads}")).join("go");
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("tfshard"))
            .args(["verify", "--json", "--threads", threads, s(&dir)])
            .env(
                "TFSHARD_FAILPOINTS",
                format!("verify:opened=wait:{}", gate.display()),
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_failpoint(&mut child, &gate, "verify opened the shard");
        fs::File::options()
            .write(true)
            .open(&shard)
            .unwrap()
            .set_len(original.len() as u64 / 2)
            .unwrap();
        fs::write(&gate, "").unwrap();
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(1), "threads {threads}: {err}");
        let report: Value = serde_json::from_slice(&done.stdout).unwrap();
        let found = problems(&report);
        assert!(
            found
                .iter()
                .any(|p| p.0.ends_with("data-00000-of-00001.tfrecord")
                    && p.1.is_some()
                    && p.3.starts_with("truncated")),
            "threads {threads}: {found:?}"
        );
    }
    fs::write(&shard, &original).unwrap();
}
