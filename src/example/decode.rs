//! Record bytes → messages, and messages → the JSON lines `inspect` prints.

use std::fmt::Write as _;

use base64::Engine as _;
use prost::Message;

use crate::error::{Error, ErrorKind, Result};
use crate::example::proto::{Example, Feature, Features, Kind, SequenceExample};
use crate::example::{Record, RecordType};

/// Decodes one record's payload as the given message type.
///
/// # Errors
///
/// `decode error` when the bytes are not a valid message of that type.
pub fn decode_record(bytes: &[u8], record_type: RecordType) -> Result<Record> {
    let result = match record_type {
        RecordType::Example => Example::decode(bytes).map(Record::Example),
        RecordType::SequenceExample => SequenceExample::decode(bytes).map(Record::SequenceExample),
        RecordType::Bytes => Ok(Record::Bytes(bytes.to_vec())),
    };
    result.map_err(|source| {
        Error::new(ErrorKind::Decode {
            message: record_type.message_name(),
            source,
        })
    })
}

/// Appends a float as `inspect` prints it: the float32 value widened to float64 in
/// shortest round-trip form, `NaN`/`Infinity`/`-Infinity` as Python's `json` reads them.
pub fn push_float(out: &mut String, value: f32) {
    let wide = f64::from(value);
    if wide.is_nan() {
        out.push_str("NaN");
    } else if wide.is_infinite() {
        out.push_str(if wide > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        let _ = write!(
            out,
            "{}",
            serde_json::Number::from_f64(wide).expect("finite")
        );
    }
}

fn push_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("a string always serializes"));
}

/// Appends one feature as `{"int64": [...]}`, `{"float": [...]}`, `{"bytes": [...]}`
/// (all values valid UTF-8) or `{"bytes_b64": [...]}`.
pub fn push_feature(out: &mut String, feature: &Feature) {
    match &feature.kind {
        None => out.push_str("{}"),
        Some(Kind::Int64List(list)) => {
            out.push_str("{\"int64\": [");
            for (i, v) in list.value.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{v}");
            }
            out.push_str("]}");
        }
        Some(Kind::FloatList(list)) => {
            out.push_str("{\"float\": [");
            for (i, v) in list.value.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_float(out, *v);
            }
            out.push_str("]}");
        }
        Some(Kind::BytesList(list)) => {
            let texts: Option<Vec<&str>> = list
                .value
                .iter()
                .map(|v| std::str::from_utf8(v).ok())
                .collect();
            match texts {
                Some(texts) => {
                    out.push_str("{\"bytes\": [");
                    for (i, t) in texts.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        push_string(out, t);
                    }
                }
                None => {
                    out.push_str("{\"bytes_b64\": [");
                    for (i, v) in list.value.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        out.push('"');
                        out.push_str(&base64::engine::general_purpose::STANDARD.encode(v));
                        out.push('"');
                    }
                }
            }
            out.push_str("]}");
        }
    }
}

fn push_features(out: &mut String, features: Option<&Features>) {
    out.push('{');
    if let Some(features) = features {
        for (i, (name, feature)) in features.feature.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            push_string(out, name);
            out.push_str(": ");
            push_feature(out, feature);
        }
    }
    out.push('}');
}

/// Appends a record as one JSON object (no newline), features sorted by name.
pub fn push_json(out: &mut String, record: &Record) {
    match record {
        Record::Example(example) => push_features(out, example.features.as_ref()),
        Record::SequenceExample(seq) => push_sequence(out, seq),
        Record::Bytes(bytes) => {
            out.push_str("{\"bytes\": \"");
            base64::engine::general_purpose::STANDARD.encode_string(bytes, out);
            out.push_str("\"}");
        }
    }
}

fn push_sequence(out: &mut String, seq: &SequenceExample) {
    out.push_str("{\"context\": ");
    push_features(out, seq.context.as_ref());
    out.push_str(", \"feature_lists\": {");
    if let Some(lists) = &seq.feature_lists {
        for (i, (name, list)) in lists.feature_list.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            push_string(out, name);
            out.push_str(": [");
            for (j, step) in list.feature.iter().enumerate() {
                if j > 0 {
                    out.push_str(", ");
                }
                push_feature(out, step);
            }
            out.push(']');
        }
    }
    out.push_str("}}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(record: &Record) -> String {
        let mut out = String::new();
        push_json(&mut out, record);
        out
    }

    #[test]
    fn floats_print_as_widened_float32() {
        let mut out = String::new();
        for v in [
            0.1f32,
            1.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            3.4028235e38,
        ] {
            push_float(&mut out, v);
            out.push(' ');
        }
        assert_eq!(
            out,
            "0.10000000149011612 1.0 NaN Infinity -Infinity -0.0 3.4028234663852886e+38 "
        );
    }

    #[test]
    fn bytes_are_text_or_all_base64() {
        let mut features = Features::default();
        features.feature.insert(
            "t".into(),
            Feature::bytes(vec![b"a\"b".to_vec(), b"".to_vec()]),
        );
        features
            .feature
            .insert("u".into(), Feature::bytes(vec![b"ok".to_vec(), vec![0xff]]));
        features
            .feature
            .insert("i".into(), Feature::int64(vec![-1, 2]));
        let record = Record::Example(Example {
            features: Some(features),
        });
        assert_eq!(
            json(&record),
            r#"{"i": {"int64": [-1, 2]}, "t": {"bytes": ["a\"b", ""]}, "u": {"bytes_b64": ["b2s=", "/w=="]}}"#
        );
    }
}
