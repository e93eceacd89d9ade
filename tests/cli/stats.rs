//! `tfshard stats`: statistics of TensorFlow's own records, in TFDV's format.

use prost::Message;
use serde_json::Value;
use tfshard::stats::proto;

use crate::{golden, run, scratch};

fn feature<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no feature {name} in {json}"))
}

/// The records TensorFlow wrote (testdata/golden/examples.tfrecord), counted by hand:
/// presence with empty lists present, values per record, numbers (NaN and infinities
/// apart), bytes' unique values, lengths and values that are not UTF-8.
#[test]
fn statistics_of_tensorflows_records() {
    let (code, out, err) = run([
        "stats",
        golden("examples.tfrecord").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["records"], 4);
    let label = feature(&json, "label");
    assert_eq!(label["type"], "INT");
    assert_eq!(
        (label["present"].as_u64(), label["missing"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(label["values_per_record"][0], 0.0);
    assert_eq!(label["values_per_record"][2], 1.0);
    let n = &label["numbers"];
    assert_eq!(
        (n["min"].as_f64(), n["max"].as_f64()),
        (Some(3.0), Some(7.0))
    );
    assert_eq!(
        (n["mean"].as_f64(), n["std_dev"].as_f64()),
        (Some(5.0), Some(2.0))
    );
    let ints = &feature(&json, "ints")["numbers"];
    assert_eq!(ints["zeros"], 1);
    assert_eq!(ints["min"].as_f64(), Some(i64::MIN as f64));
    assert_eq!(ints["max"].as_f64(), Some(i64::MAX as f64));
    let vec = &feature(&json, "vec")["numbers"];
    assert_eq!(vec["nan"], 1);
    assert_eq!(vec["min"].as_f64(), None, "-inf is no JSON number: {vec}");
    let score = &feature(&json, "score")["numbers"];
    // The float32 values written, not their float64 sources.
    assert_eq!(score["min"].as_f64(), Some(f64::from(f32::from_bits(1))));
    // (serde_json's default parser may miss the last bit of a large number.)
    let max = score["max"].as_f64().unwrap();
    assert!((max / f64::from(f32::MAX) - 1.0).abs() < 1e-15, "{max}");
    let tags = feature(&json, "tags");
    assert_eq!(tags["type"], "STRING");
    assert_eq!(tags["present"], 2);
    assert_eq!(tags["strings"]["unique"], 3);
    assert_eq!(tags["strings"]["avg_length"], 1.0);
    assert_eq!(feature(&json, "blob")["strings"]["invalid_utf8"], 1);
    let id = &feature(&json, "id")["strings"]["top_values"];
    assert_eq!(id.as_array().unwrap().len(), 3);
    // Ties: the greater value first, as TFDV orders them.
    assert_eq!(id[0][0], "row-3");
}

/// `--format tfdv -o FILE` writes a `DatasetFeatureStatisticsList` whose one dataset
/// names each feature by a one-step path; without `-o` it is a usage error.
#[test]
fn tfdv_format_is_a_statistics_list() {
    let dir = scratch("stats-tfdv");
    let out = dir.join("stats.pb");
    let (code, _, err) = run([
        "stats",
        golden("examples.tfrecord").to_str().unwrap(),
        "--format",
        "tfdv",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let list = proto::DatasetFeatureStatisticsList::decode(&*std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(list.datasets.len(), 1);
    let d = &list.datasets[0];
    assert_eq!(d.num_examples, 4);
    let label = d
        .features
        .iter()
        .find(|f| tfshard::stats::feature_name(f) == "label")
        .unwrap();
    assert_eq!(
        label.field_id,
        Some(proto::FieldId::Path(proto::Path {
            step: vec!["label".into()]
        }))
    );
    assert_eq!(label.r#type, proto::FeatureType::Int as i32);
    let Some(proto::Stats::NumStats(n)) = &label.stats else {
        panic!("{label:?}")
    };
    // TFDV's median of two values: the greater (the value at index floor(n / 2)).
    assert_eq!((n.mean, n.std_dev, n.median), (5.0, 2.0, 7.0));
    let types: Vec<i32> = n.histograms.iter().map(|h| h.r#type).collect();
    assert_eq!(
        types,
        [
            proto::HistogramType::Standard as i32,
            proto::HistogramType::Quantiles as i32
        ]
    );
    let total: f64 = n.histograms[0].buckets.iter().map(|b| b.sample_count).sum();
    assert_eq!(total, 2.0);

    let (code, _, err) = run([
        "stats",
        golden("examples.tfrecord").to_str().unwrap(),
        "--format",
        "tfdv",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("-o FILE"), "{err}");
}

/// A file cut short: exit 1, the file named; nothing written.
#[test]
fn a_corrupt_file_is_named() {
    let dir = scratch("stats-corrupt");
    let bytes = std::fs::read(golden("examples.tfrecord")).unwrap();
    let cut = dir.join("cut.tfrecord");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let out = dir.join("stats.pb");
    let (code, _, err) = run([
        "stats",
        cut.to_str().unwrap(),
        "--format",
        "tfdv",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cut.tfrecord"), "{err}");
    assert!(!out.exists());
}

/// The table names every feature on a line of its own.
#[test]
fn the_table_has_a_line_a_feature() {
    let (code, out, err) = run(["stats", golden("examples.tfrecord").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for name in ["blob", "id", "ints", "label", "score", "tags", "vec"] {
        assert_eq!(
            out.lines()
                .filter(|l| l.split_whitespace().next() == Some(name))
                .count(),
            1,
            "{name}: {out}"
        );
    }
    assert!(out.starts_with("4 records, 7 features"), "{out}");
}
