//! The `tf.train.Example` codec, both ways. `proto` holds the messages; `encode` turns
//! Arrow columns into record bytes; `decode` turns record bytes back into messages and
//! JSON; `schema` is the feature spec both directions share. Knows nothing of files.

pub mod bytes;
pub(crate) mod columnar;
pub mod decode;
pub mod encode;
pub(crate) mod image;
pub mod proto;
pub(crate) mod scan;
pub mod schema;
pub(crate) mod wire;

use serde::{Deserialize, Serialize};

pub use decode::decode_record;
pub use schema::{FeatureKind, FeatureSpec, Part, SpecMismatch};

/// Which message each record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordType {
    /// `tf.train.Example`
    #[default]
    Example,
    /// `tf.train.SequenceExample`
    SequenceExample,
    /// Opaque payloads (`convert tfrecord --record-type bytes`): copied, never parsed.
    Bytes,
}

impl RecordType {
    /// The manifest's spelling: `example`, `sequence_example` or `bytes`.
    pub fn name(self) -> &'static str {
        match self {
            RecordType::Example => "example",
            RecordType::SequenceExample => "sequence_example",
            RecordType::Bytes => "bytes",
        }
    }

    /// The protobuf message's name.
    pub fn message_name(self) -> &'static str {
        match self {
            RecordType::Example => "tf.train.Example",
            RecordType::SequenceExample => "tf.train.SequenceExample",
            RecordType::Bytes => "bytes",
        }
    }
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// A `tf.train.Example`.
    Example(proto::Example),
    /// A `tf.train.SequenceExample`.
    SequenceExample(proto::SequenceExample),
    /// An opaque payload ([`RecordType::Bytes`]).
    Bytes(Vec<u8>),
}
