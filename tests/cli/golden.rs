//! Files written by real TensorFlow (`scripts/make_golden.py`): we read every one, print
//! exactly what Python printed, and rebuild the plain ones byte for byte.

use std::fs;

use base64::Engine as _;
use prost::Message;
use serde_json::Value;

use tfshard::example::proto::{Example, SequenceExample};
use tfshard::tfrecord::{self, RecordWriter};

use crate::{golden, run, s};

fn expectations() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(crate::root().join("testdata/golden")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(file) = name.strip_suffix(".expected.json") {
            let json: Value = serde_json::from_slice(&fs::read(golden(&name)).unwrap()).unwrap();
            out.push((file.to_owned(), json));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        out.len() >= 8,
        "golden files missing: run scripts/make_golden.py"
    );
    out
}

fn payloads(file: &str) -> Vec<Vec<u8>> {
    let mut reader = tfrecord::open(&golden(file), None).unwrap();
    let mut out = Vec::new();
    while let Some(r) = reader
        .read_record()
        .unwrap_or_else(|e| panic!("{file}: {e}"))
    {
        out.push(r.to_vec());
    }
    out
}

fn large_payload() -> Vec<u8> {
    (0..1_000_000u64)
        .map(|i| ((i * 7919) % 251) as u8)
        .collect()
}

#[test]
fn we_read_every_golden_file() {
    for (file, want) in expectations() {
        let got = payloads(&file);
        let lengths: Vec<u64> = got.iter().map(|p| p.len() as u64).collect();
        let want_lengths: Vec<u64> = want["payload_lengths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(lengths, want_lengths, "{file}");
        if let Some(b64) = want["payloads_b64"].as_array() {
            for (i, p) in b64.iter().enumerate() {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(p.as_str().unwrap())
                    .unwrap();
                assert_eq!(got[i], bytes, "{file} record {i}");
            }
        }
        if file.starts_with("large") {
            assert_eq!(got[1], large_payload());
        }
    }
}

#[test]
fn inspect_prints_what_python_prints() {
    for (file, want) in expectations() {
        let Some(lines) = want["lines"].as_array() else {
            continue;
        };
        let path = golden(&file);
        let mut args = vec!["inspect", s(&path)];
        if file.starts_with("sequence") {
            args.extend(["--record-type", "sequence-example"]);
        }
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 0, "{file}: {stderr}");
        let got: Vec<&str> = stdout.lines().collect();
        let want: Vec<&str> = lines.iter().map(|l| l.as_str().unwrap()).collect();
        assert_eq!(got, want, "{file}");
    }
}

#[test]
fn our_writer_reproduces_the_plain_files_byte_for_byte() {
    for file in [
        "examples.tfrecord",
        "sequence.tfrecord",
        "empty.tfrecord",
        "zero_length.tfrecord",
        "large_record.tfrecord",
    ] {
        let original = fs::read(golden(file)).unwrap();
        let mut rebuilt = Vec::new();
        let mut writer = RecordWriter::new(&mut rebuilt);
        for payload in payloads(file) {
            // Decode the message and serialize it again: prost's bytes must equal
            // TensorFlow's SerializeToString(deterministic=True).
            let bytes = match file {
                "examples.tfrecord" => Example::decode(&payload[..]).unwrap().encode_to_vec(),
                "sequence.tfrecord" => SequenceExample::decode(&payload[..])
                    .unwrap()
                    .encode_to_vec(),
                _ => payload,
            };
            writer.write_record(&bytes).unwrap();
        }
        if let Some(at) = original.iter().zip(&rebuilt).position(|(a, b)| a != b) {
            panic!("{file}: first difference at byte offset {at}");
        }
        assert_eq!(original.len(), rebuilt.len(), "{file}");
    }
}
