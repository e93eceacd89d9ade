//! Writes Examples and SequenceExamples through the library (plain, gzip, zlib), with
//! the JSON lines `tfshard inspect` should print for them: the input of
//! `scripts/tf_interop.sh`, where TensorFlow reads them back.
//!
//! `cargo run --example write_records -- OUT_DIR`

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use prost::Message;
use tfshard::example::decode::push_json;
use tfshard::example::proto::{
    Example, Feature, FeatureList, FeatureLists, Features, SequenceExample,
};
use tfshard::example::Record;
use tfshard::tfrecord::compress::Encoder;
use tfshard::tfrecord::{Compression, RecordWriter};

fn examples() -> Vec<Example> {
    (0..50)
        .map(|i| {
            let mut f = Features::default();
            f.feature
                .insert("label".into(), Feature::int64(vec![i % 5]));
            f.feature.insert(
                "vec".into(),
                Feature::float(vec![i as f32 * 0.5, -1.0, 1e-3]),
            );
            f.feature.insert(
                "name".into(),
                Feature::bytes(vec![format!("row-{i}").into_bytes()]),
            );
            if i % 3 != 0 {
                f.feature
                    .insert("tags".into(), Feature::int64((0..i % 4).collect()));
            }
            Example { features: Some(f) }
        })
        .collect()
}

fn sequences() -> Vec<SequenceExample> {
    (0..20)
        .map(|i| {
            let mut context = Features::default();
            context.feature.insert("id".into(), Feature::int64(vec![i]));
            let mut lists = FeatureLists::default();
            lists.feature_list.insert(
                "frames".into(),
                FeatureList {
                    feature: (0..i % 4)
                        .map(|s| Feature::float(vec![s as f32, 1.5]))
                        .collect(),
                },
            );
            lists.feature_list.insert(
                "tokens".into(),
                FeatureList {
                    feature: (0..3)
                        .map(|s| Feature::int64((0..(s + i) % 3).collect()))
                        .collect(),
                },
            );
            SequenceExample {
                context: Some(context),
                feature_lists: Some(lists),
            }
        })
        .collect()
}

fn write(path: PathBuf, payloads: &[Vec<u8>], compression: Compression) -> std::io::Result<()> {
    let mut encoder = Encoder::new(BufWriter::new(File::create(path)?), compression);
    let mut writer = RecordWriter::new(&mut encoder);
    for p in payloads {
        writer.write_record(p).map_err(std::io::Error::other)?;
    }
    encoder.finish()?;
    Ok(())
}

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/interop".into()),
    );
    std::fs::create_dir_all(&out)?;
    let ex = examples();
    let seq = sequences();
    let ex_bytes: Vec<Vec<u8>> = ex.iter().map(Message::encode_to_vec).collect();
    let seq_bytes: Vec<Vec<u8>> = seq.iter().map(Message::encode_to_vec).collect();
    for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
        write(
            out.join(format!("examples.tfrecord{}", c.suffix())),
            &ex_bytes,
            c,
        )?;
        write(
            out.join(format!("sequence.tfrecord{}", c.suffix())),
            &seq_bytes,
            c,
        )?;
    }
    for (name, records) in [
        (
            "examples",
            ex.into_iter().map(Record::Example).collect::<Vec<_>>(),
        ),
        (
            "sequence",
            seq.into_iter().map(Record::SequenceExample).collect(),
        ),
    ] {
        let mut lines = BufWriter::new(File::create(out.join(format!("{name}.jsonl")))?);
        for r in &records {
            let mut line = String::new();
            push_json(&mut line, r);
            writeln!(lines, "{line}")?;
        }
    }
    println!("wrote {}", out.display());
    Ok(())
}
