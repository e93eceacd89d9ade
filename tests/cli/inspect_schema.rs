//! `inspect` and `schema` from the command line.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::{golden, run, s, scratch};

#[test]
fn inspect_limit_and_json_flag() {
    let file = golden("examples.tfrecord");
    let (code, out, _) = run(["inspect", s(&file), "--limit", "2"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2);
    let (code, json_out, _) = run(["inspect", s(&file), "--limit", "2", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(out, json_out, "--json prints the same");
}

#[test]
fn inspect_reads_gzip_by_content_without_extension() {
    let dir = scratch("inspect_gzip_no_ext");
    let renamed = dir.join("records.bin");
    std::fs::copy(golden("examples.tfrecord.gz"), &renamed).unwrap();
    let (code, out, err) = run(["inspect", s(&renamed)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4);
}

#[test]
fn inspect_into_a_closed_pipe_exits_0() {
    let exe = assert_cmd::cargo::cargo_bin("tfshard");
    let mut child = Command::new(exe)
        .args(["inspect", s(&golden("examples.tfrecord"))])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn errors_are_one_line_with_exit_codes() {
    let (code, _, err) = run(["inspect", "does-not-exist.tfrecord"]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does-not-exist.tfrecord"), "{err}");

    let (code, _, _) = run(["inspect", "--no-such-flag"]);
    assert_eq!(code, 2);
    let (code, _, _) = run(["schema"]);
    assert_eq!(code, 2, "a missing argument is usage");

    // A corrupt record names file, record and offset.
    let dir = scratch("inspect_corrupt");
    let mut bytes = std::fs::read(golden("examples.tfrecord")).unwrap();
    let second = 12 + 147 + 4;
    bytes[second + 20] ^= 0x40;
    let bad = dir.join("bad.tfrecord");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, out, err) = run(["inspect", s(&bad)]);
    assert_eq!(code, 1);
    assert_eq!(
        out.lines().count(),
        1,
        "the good record before it is printed"
    );
    assert!(
        err.contains(&format!(
            "bad.tfrecord: record 1, offset {second}: data CRC mismatch"
        )),
        "{err}"
    );
}

#[test]
fn every_command_help_shows_an_example() {
    for cmd in ["inspect", "schema"] {
        let (code, out, _) = run([cmd, "--help"]);
        assert_eq!(code, 0);
        assert!(out.contains("Example"), "{cmd} --help lacks an example");
    }
}

#[test]
fn schema_python_for_sequence_examples() {
    let (code, out, err) = run([
        "schema",
        s(&golden("sequence.tfrecord")),
        "--record-type",
        "sequence-example",
        "--format",
        "python",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        "({\"len\": tf.io.FixedLenFeature([], tf.int64), \"name\": tf.io.VarLenFeature(tf.string)}, \
         {\"frames\": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True), \
         \"tokens\": tf.io.VarLenFeature(tf.int64)})"
    );
}

#[test]
fn schema_json_is_the_feature_list() {
    let (code, out, _) = run(["schema", s(&golden("examples.tfrecord"))]);
    assert_eq!(code, 0);
    let spec: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = spec
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["blob", "id", "ints", "label", "score", "tags", "vec"]
    );
    assert_eq!(spec[1]["kind"], "bytes");
    assert!(spec[1]["shape"].is_null(), "id is missing from one record");
}
