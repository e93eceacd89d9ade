//! Property tests: arbitrary Examples and SequenceExamples round-trip through our writer
//! and reader, with and without compression.

use std::collections::BTreeMap;
use std::io::Write;

use proptest::prelude::*;
use prost::Message;

use tfshard::example::proto::{
    Example, Feature, FeatureList, FeatureLists, Features, SequenceExample,
};
use tfshard::tfrecord::compress::Encoder;
use tfshard::tfrecord::{self, Compression, RecordReader, RecordWriter};

fn feature() -> impl Strategy<Value = Feature> {
    prop_oneof![
        prop::collection::vec(any::<i64>(), 0..8).prop_map(Feature::int64),
        prop::collection::vec(
            any::<f32>().prop_filter("NaN != NaN", |f| !f.is_nan()),
            0..8
        )
        .prop_map(Feature::float),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..4)
            .prop_map(Feature::bytes),
        Just(Feature::default()),
    ]
}

fn features() -> impl Strategy<Value = Features> {
    prop::collection::btree_map("[a-z/_]{0,6}", feature(), 0..6)
        .prop_map(|feature| Features { feature })
}

fn example() -> impl Strategy<Value = Example> {
    prop::option::of(features()).prop_map(|features| Example { features })
}

fn sequence() -> impl Strategy<Value = SequenceExample> {
    (
        prop::option::of(features()),
        prop::option::of(prop::collection::btree_map(
            "[a-z]{1,5}",
            prop::collection::vec(feature(), 0..4).prop_map(|feature| FeatureList { feature }),
            0..3,
        )),
    )
        .prop_map(|(context, lists)| SequenceExample {
            context,
            feature_lists: lists.map(|feature_list: BTreeMap<_, _>| FeatureLists { feature_list }),
        })
}

fn write_read(payloads: &[Vec<u8>], compression: Compression) -> Vec<Vec<u8>> {
    let mut encoder = Encoder::new(Vec::new(), compression);
    {
        let mut writer = RecordWriter::new(&mut encoder);
        for p in payloads {
            writer.write_record(p).unwrap();
        }
    }
    encoder.flush().unwrap();
    let bytes = encoder.finish().unwrap();
    let mut reader = RecordReader::new(tfrecord::decompress(
        std::io::Cursor::new(bytes),
        compression,
    ));
    let mut out = Vec::new();
    while let Some(r) = reader.read_record().unwrap() {
        out.push(r.to_vec());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn examples_round_trip(examples in prop::collection::vec(example(), 0..6)) {
        let payloads: Vec<Vec<u8>> = examples.iter().map(|e| e.encode_to_vec()).collect();
        for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
            let back = write_read(&payloads, c);
            let decoded: Vec<Example> = back.iter().map(|b| Example::decode(&b[..]).unwrap()).collect();
            prop_assert_eq!(&decoded, &examples);
        }
    }

    #[test]
    fn sequence_examples_round_trip(seqs in prop::collection::vec(sequence(), 0..4)) {
        let payloads: Vec<Vec<u8>> = seqs.iter().map(|e| e.encode_to_vec()).collect();
        for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
            let back = write_read(&payloads, c);
            let decoded: Vec<SequenceExample> =
                back.iter().map(|b| SequenceExample::decode(&b[..]).unwrap()).collect();
            prop_assert_eq!(&decoded, &seqs);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_reader(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut reader = RecordReader::new(&bytes[..]);
        for _ in 0..10 {
            match reader.read_record() {
                Ok(Some(r)) => { let _ = Example::decode(r); }
                _ => break,
            }
        }
    }
}
