//! `tf.train.Example` and friends (`tensorflow/core/example/{example,feature}.proto`),
//! as prost messages written by hand, so no `protoc` is needed.
//!
//! Maps are `BTreeMap`s, so entries serialize sorted by key, as TensorFlow's
//! `SerializeToString(deterministic=True)` does. The two map-holding messages
//! (`Features`, `FeatureLists`) implement `prost::Message` by hand: protobuf's C++ and upb
//! encoders always write both the key and the value of a map entry, while prost's derived
//! map encoding skips an empty key or an empty value, which would change the bytes.

use std::collections::BTreeMap;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

/// `message BytesList { repeated bytes value = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct BytesList {
    /// The values.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub value: Vec<Vec<u8>>,
}

/// `message FloatList { repeated float value = 1 [packed = true]; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct FloatList {
    /// The values.
    #[prost(float, repeated, tag = "1")]
    pub value: Vec<f32>,
}

/// `message Int64List { repeated int64 value = 1 [packed = true]; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Int64List {
    /// The values.
    #[prost(int64, repeated, tag = "1")]
    pub value: Vec<i64>,
}

/// `message Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
/// Int64List int64_list = 3; } }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Feature {
    /// The one list this feature holds (none for an empty `Feature`).
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    pub kind: Option<Kind>,
}

/// The oneof of [`Feature`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    /// `bytes_list = 1`
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    /// `float_list = 2`
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    /// `int64_list = 3`
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

/// `message Features { map<string, Feature> feature = 1; }`
#[derive(Clone, PartialEq, Default, Debug)]
pub struct Features {
    /// Feature name → feature, sorted by name.
    pub feature: BTreeMap<String, Feature>,
}

/// `message FeatureList { repeated Feature feature = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct FeatureList {
    /// One feature per step.
    #[prost(message, repeated, tag = "1")]
    pub feature: Vec<Feature>,
}

/// `message FeatureLists { map<string, FeatureList> feature_list = 1; }`
#[derive(Clone, PartialEq, Default, Debug)]
pub struct FeatureLists {
    /// Name → feature list, sorted by name.
    pub feature_list: BTreeMap<String, FeatureList>,
}

/// `message Example { Features features = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Example {
    /// The features (present, possibly empty, in every Example we write).
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}

/// `message SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct SequenceExample {
    /// Per-sequence features.
    #[prost(message, optional, tag = "1")]
    pub context: Option<Features>,
    /// Per-step features.
    #[prost(message, optional, tag = "2")]
    pub feature_lists: Option<FeatureLists>,
}

/// The length of a map entry `{1: key, 2: value}` whose value encodes to `value_len`.
fn entry_len(key: &str, value_len: usize) -> usize {
    encoding::key_len(1)
        + encoding::encoded_len_varint(key.len() as u64)
        + key.len()
        + encoding::key_len(2)
        + encoding::encoded_len_varint(value_len as u64)
        + value_len
}

fn encode_map<V: prost::Message>(map: &BTreeMap<String, V>, buf: &mut impl BufMut) {
    for (key, value) in map {
        let value_len = value.encoded_len();
        encoding::encode_key(1, WireType::LengthDelimited, buf);
        encoding::encode_varint(entry_len(key, value_len) as u64, buf);
        encoding::encode_key(1, WireType::LengthDelimited, buf);
        encoding::encode_varint(key.len() as u64, buf);
        buf.put_slice(key.as_bytes());
        encoding::encode_key(2, WireType::LengthDelimited, buf);
        encoding::encode_varint(value_len as u64, buf);
        value.encode_raw(buf);
    }
}

fn map_len<V: prost::Message>(map: &BTreeMap<String, V>) -> usize {
    map.iter()
        .map(|(key, value)| {
            let len = entry_len(key, value.encoded_len());
            encoding::key_len(1) + encoding::encoded_len_varint(len as u64) + len
        })
        .sum()
}

macro_rules! map_message {
    ($message:ty, $field:ident) => {
        impl prost::Message for $message {
            fn encode_raw(&self, buf: &mut impl BufMut) {
                encode_map(&self.$field, buf);
            }

            fn merge_field(
                &mut self,
                tag: u32,
                wire_type: WireType,
                buf: &mut impl Buf,
                ctx: DecodeContext,
            ) -> Result<(), DecodeError> {
                if tag == 1 {
                    encoding::btree_map::merge(
                        encoding::string::merge,
                        encoding::message::merge,
                        &mut self.$field,
                        buf,
                        ctx,
                    )
                } else {
                    encoding::skip_field(wire_type, tag, buf, ctx)
                }
            }

            fn encoded_len(&self) -> usize {
                map_len(&self.$field)
            }

            fn clear(&mut self) {
                self.$field.clear();
            }
        }
    };
}

map_message!(Features, feature);
map_message!(FeatureLists, feature_list);

impl Feature {
    /// A feature holding an `int64_list`.
    pub fn int64(values: Vec<i64>) -> Feature {
        Feature {
            kind: Some(Kind::Int64List(Int64List { value: values })),
        }
    }

    /// A feature holding a `float_list`.
    pub fn float(values: Vec<f32>) -> Feature {
        Feature {
            kind: Some(Kind::FloatList(FloatList { value: values })),
        }
    }

    /// A feature holding a `bytes_list`.
    pub fn bytes(values: Vec<Vec<u8>>) -> Feature {
        Feature {
            kind: Some(Kind::BytesList(BytesList { value: values })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn map_entries_keep_empty_keys_and_values() {
        // Bytes from Python: tf.train.Features(feature={"": tf.train.Feature()})
        //   .SerializeToString(deterministic=True) == b'\n\x04\n\x00\x12\x00'
        let mut features = Features::default();
        features.feature.insert(String::new(), Feature::default());
        assert_eq!(features.encode_to_vec(), b"\n\x04\n\x00\x12\x00");
        assert_eq!(
            Features::decode(&b"\n\x04\n\x00\x12\x00"[..]).unwrap(),
            features
        );
    }

    #[test]
    fn sorted_and_packed() {
        let mut features = Features::default();
        features
            .feature
            .insert("b".into(), Feature::int64(vec![1, -1]));
        features.feature.insert("a".into(), Feature::float(vec![]));
        let example = Example {
            features: Some(features),
        };
        let bytes = example.encode_to_vec();
        // a: float_list present and empty; b: packed varints, -1 as 10 bytes.
        let want: Vec<u8> = [
            &b"\n\x1f"[..],
            b"\n\x07\n\x01a\x12\x02\x12\x00",
            b"\n\x14\n\x01b\x12\x0f\x1a\x0d\n\x0b\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        ]
        .concat();
        assert_eq!(bytes, want);
        assert_eq!(Example::decode(&bytes[..]).unwrap(), example);
    }
}
