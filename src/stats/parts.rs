//! A [`Partial`] as bytes: what a conversion keeps beside each shard (its `.stats`
//! file), so that a set's statistics are merged from the partials of exactly its live
//! shards after appends, workers and resumed runs, without reading a shard again.
//!
//! A message of our own (prost), never read by another tool: counts and moments as they
//! are, each quantile stream as its summary, distinct values as their exact counts
//! (sorted, so the bytes are the same for the same partial) or as the HyperLogLog and
//! frequent-items sketches in DataSketches' own serialization.

use datasketches::frequencies::FrequentItemsSketch;
use datasketches::hll::HllSketch;
use prost::Message;

use super::partial::{
    Distinct, FeaturePartial, Lengths, Numbers, Partial, Strings, Value, STREAM_EPS, SUMMARY_SIZE,
};
use super::quantiles::{Entry, Stream, Summary};
use crate::error::{Error, ErrorKind, Result};
use crate::example::schema::FeatureKind;

/// The format's version: a reader refuses another.
const VERSION: u32 = 1;

#[derive(Clone, PartialEq, Message)]
struct PartialMsg {
    #[prost(uint32, tag = "1")]
    version: u32,
    #[prost(uint64, tag = "2")]
    records: u64,
    #[prost(uint64, tag = "3")]
    undecodable: u64,
    #[prost(message, repeated, tag = "4")]
    features: Vec<FeatureMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct FeatureMsg {
    #[prost(string, tag = "1")]
    name: String,
    /// 0: none seen with a list; 1 int64; 2 float; 3 bytes.
    #[prost(uint32, tag = "2")]
    kind: u32,
    #[prost(uint64, tag = "3")]
    present: u64,
    #[prost(message, optional, tag = "4")]
    lengths: Option<LengthsMsg>,
    #[prost(message, optional, tag = "5")]
    numbers: Option<NumbersMsg>,
    #[prost(message, optional, tag = "6")]
    strings: Option<StringsMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct SummaryMsg {
    #[prost(double, repeated, tag = "1")]
    values: Vec<f64>,
    #[prost(uint64, repeated, tag = "2")]
    weights: Vec<u64>,
    #[prost(uint64, repeated, tag = "3")]
    min_ranks: Vec<u64>,
    #[prost(uint64, repeated, tag = "4")]
    max_ranks: Vec<u64>,
}

#[derive(Clone, PartialEq, Message)]
struct LengthsMsg {
    #[prost(uint64, tag = "1")]
    min: u64,
    #[prost(uint64, tag = "2")]
    max: u64,
    #[prost(uint64, tag = "3")]
    total: u64,
    #[prost(message, optional, tag = "4")]
    summary: Option<SummaryMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct NumbersMsg {
    #[prost(uint64, tag = "1")]
    count: u64,
    #[prost(uint64, tag = "2")]
    nan: u64,
    #[prost(uint64, tag = "3")]
    zeros: u64,
    #[prost(uint64, tag = "4")]
    pos_inf: u64,
    #[prost(uint64, tag = "5")]
    neg_inf: u64,
    #[prost(double, tag = "6")]
    min: f64,
    #[prost(double, tag = "7")]
    max: f64,
    #[prost(double, tag = "8")]
    finite_min: f64,
    #[prost(double, tag = "9")]
    finite_max: f64,
    #[prost(double, tag = "10")]
    mean: f64,
    #[prost(double, tag = "11")]
    m2: f64,
    #[prost(message, optional, tag = "12")]
    summary: Option<SummaryMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct ValueCount {
    #[prost(bytes = "vec", tag = "1")]
    value: Vec<u8>,
    #[prost(uint64, tag = "2")]
    count: u64,
}

#[derive(Clone, PartialEq, Message)]
struct StringsMsg {
    #[prost(uint64, tag = "1")]
    total_len: u64,
    #[prost(uint64, optional, tag = "2")]
    min_len: Option<u64>,
    #[prost(uint64, tag = "3")]
    max_len: u64,
    #[prost(uint64, tag = "4")]
    invalid_utf8: u64,
    /// Exact counts, by value.
    #[prost(message, repeated, tag = "5")]
    exact: Vec<ValueCount>,
    /// Else the sketches.
    #[prost(bytes = "vec", optional, tag = "6")]
    hll: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "7")]
    top: Option<Vec<u8>>,
}

fn summary_msg(stream: &Stream) -> SummaryMsg {
    let summary = stream.summary(SUMMARY_SIZE);
    let e = summary.entries();
    SummaryMsg {
        values: e.iter().map(|e| e.value).collect(),
        weights: e.iter().map(|e| e.weight).collect(),
        min_ranks: e.iter().map(|e| e.min_rank).collect(),
        max_ranks: e.iter().map(|e| e.max_rank).collect(),
    }
}

fn damaged(detail: impl Into<String>) -> Error {
    Error::new(ErrorKind::StatsDamaged(detail.into()))
}

fn stream_of(msg: Option<SummaryMsg>, feature: &str) -> Result<Stream> {
    let mut stream = Stream::new(STREAM_EPS);
    let Some(m) = msg else { return Ok(stream) };
    let n = m.values.len();
    if m.weights.len() != n || m.min_ranks.len() != n || m.max_ranks.len() != n {
        return Err(damaged(format!(
            "feature {feature:?}: a summary's columns differ in length"
        )));
    }
    let entries = (0..n)
        .map(|i| Entry {
            value: m.values[i],
            weight: m.weights[i],
            min_rank: m.min_ranks[i],
            max_rank: m.max_ranks[i],
        })
        .collect();
    let summary = Summary::from_entries(entries);
    summary
        .validate()
        .map_err(|why| damaged(format!("feature {feature:?}: {why}")))?;
    if !summary.is_empty() {
        stream.push_summary(&summary);
    }
    Ok(stream)
}

impl Partial {
    /// The partial as bytes ([`Partial::from_bytes`] reads them back).
    pub fn to_bytes(&self) -> Vec<u8> {
        let features = self
            .sorted()
            .into_iter()
            .map(|f| FeatureMsg {
                name: f.name.clone(),
                kind: match f.kind {
                    None => 0,
                    Some(FeatureKind::Int64) => 1,
                    Some(FeatureKind::Float) => 2,
                    Some(FeatureKind::Bytes) => 3,
                },
                present: f.present,
                lengths: Some(LengthsMsg {
                    min: f.lengths.min,
                    max: f.lengths.max,
                    total: f.lengths.total,
                    summary: Some(summary_msg(&f.lengths.stream)),
                }),
                numbers: (f.numbers.count > 0 || f.numbers.nan > 0).then(|| {
                    let n = &f.numbers;
                    NumbersMsg {
                        count: n.count,
                        nan: n.nan,
                        zeros: n.zeros,
                        pos_inf: n.pos_inf,
                        neg_inf: n.neg_inf,
                        min: n.min,
                        max: n.max,
                        finite_min: n.finite_min,
                        finite_max: n.finite_max,
                        mean: n.mean,
                        m2: n.m2,
                        summary: Some(summary_msg(&n.stream)),
                    }
                }),
                strings: f.strings.min_len.is_some().then(|| {
                    let s = &f.strings;
                    let (exact, hll, top) = match &s.distinct {
                        Distinct::Exact(map) => {
                            let mut exact: Vec<ValueCount> = map
                                .iter()
                                .map(|(v, c)| ValueCount {
                                    value: v.clone(),
                                    count: *c,
                                })
                                .collect();
                            exact.sort_unstable_by(|a, b| a.value.cmp(&b.value));
                            (exact, None, None)
                        }
                        Distinct::Sketched { hll, top } => {
                            (Vec::new(), Some(hll.serialize()), Some(top.serialize()))
                        }
                    };
                    StringsMsg {
                        total_len: s.total_len,
                        min_len: s.min_len,
                        max_len: s.max_len,
                        invalid_utf8: s.invalid_utf8,
                        exact,
                        hll,
                        top,
                    }
                }),
            })
            .collect();
        PartialMsg {
            version: VERSION,
            records: self.records,
            undecodable: self.undecodable,
            features,
        }
        .encode_to_vec()
    }

    /// A partial read back from [`Partial::to_bytes`]'s bytes.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StatsDamaged`]: not such bytes, another version, or numbers that
    /// cannot be (a summary out of order, a sketch that does not read).
    pub fn from_bytes(bytes: &[u8]) -> Result<Partial> {
        let msg = PartialMsg::decode(bytes).map_err(|e| damaged(e.to_string()))?;
        if msg.version != VERSION {
            return Err(damaged(format!(
                "partial statistics of version {} (this tfshard reads {VERSION})",
                msg.version
            )));
        }
        let mut partial = Partial::new();
        partial.records = msg.records;
        partial.undecodable = msg.undecodable;
        for f in msg.features {
            let name = f.name;
            let kind = match f.kind {
                0 => None,
                1 => Some(FeatureKind::Int64),
                2 => Some(FeatureKind::Float),
                3 => Some(FeatureKind::Bytes),
                k => return Err(damaged(format!("feature {name:?}: kind {k}"))),
            };
            if f.present > msg.records {
                return Err(damaged(format!(
                    "feature {name:?}: present in more records than counted"
                )));
            }
            let l = f.lengths.unwrap_or_default();
            let lengths = Lengths {
                min: l.min,
                max: l.max,
                total: l.total,
                stream: stream_of(l.summary, &name)?,
            };
            let numbers = match f.numbers {
                None => Numbers::default(),
                Some(n) => Numbers {
                    count: n.count,
                    nan: n.nan,
                    zeros: n.zeros,
                    pos_inf: n.pos_inf,
                    neg_inf: n.neg_inf,
                    min: n.min,
                    max: n.max,
                    finite_min: n.finite_min,
                    finite_max: n.finite_max,
                    mean: n.mean,
                    m2: n.m2,
                    stream: stream_of(n.summary, &name)?,
                },
            };
            let strings = match f.strings {
                None => Strings::default(),
                Some(s) => {
                    let distinct = match (s.hll, s.top) {
                        (Some(hll), Some(top)) => Distinct::Sketched {
                            hll: Box::new(HllSketch::deserialize(&hll).map_err(|e| {
                                damaged(format!("feature {name:?}: {}", e.message()))
                            })?),
                            top: Box::new(
                                FrequentItemsSketch::<Value>::deserialize(&top).map_err(|e| {
                                    damaged(format!("feature {name:?}: {}", e.message()))
                                })?,
                            ),
                        },
                        (None, None) => Distinct::Exact(
                            s.exact.into_iter().map(|v| (v.value, v.count)).collect(),
                        ),
                        _ => return Err(damaged(format!("feature {name:?}: half a sketch"))),
                    };
                    Strings {
                        total_len: s.total_len,
                        min_len: s.min_len,
                        max_len: s.max_len,
                        invalid_utf8: s.invalid_utf8,
                        distinct,
                    }
                }
            };
            let slot = partial.slot(&name);
            partial.features[slot] = FeaturePartial {
                name,
                kind,
                present: f.present,
                lengths,
                numbers,
                strings,
                seen: 0,
            };
        }
        Ok(partial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::RecordType;

    /// A partial read back gives the statistics it gave, and merges as it did; the bytes
    /// are the same for the same records.
    #[test]
    fn a_partial_reads_back_as_it_was() {
        let records = crate::stats::scan::tests_support::records(20_000);
        let count = |rs: &[Vec<u8>]| {
            let mut p = Partial::new();
            for r in rs {
                p.add_payload(r, RecordType::Example).unwrap();
            }
            p
        };
        let p = count(&records);
        let bytes = p.to_bytes();
        assert_eq!(bytes, count(&records).to_bytes());
        let back = Partial::from_bytes(&bytes).unwrap();
        assert_eq!(back.to_proto(), p.to_proto());
        assert_eq!(back.to_bytes(), bytes);
        let (a, b) = records.split_at(12_345);
        let mut merged = Partial::from_bytes(&count(a).to_bytes()).unwrap();
        merged
            .merge(Partial::from_bytes(&count(b).to_bytes()).unwrap())
            .unwrap();
        let (x, y) = (merged.to_proto(), p.to_proto());
        assert_eq!(x.num_examples, y.num_examples);
        assert_eq!(x.features.len(), y.features.len());
        for (fx, fy) in x.features.iter().zip(&y.features) {
            assert_eq!(fx.field_id, fy.field_id);
            assert_eq!(fx.r#type, fy.r#type);
        }
    }

    #[test]
    fn damaged_bytes_are_an_error() {
        let mut p = Partial::new();
        for r in crate::stats::scan::tests_support::records(100) {
            p.add_payload(&r, RecordType::Example).unwrap();
        }
        let bytes = p.to_bytes();
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            // Cut short: an error or (by chance a whole message) a partial, never a panic.
            let _ = Partial::from_bytes(&bytes[..cut]);
        }
        let err = Partial::from_bytes(b"\xff\xff\xff").unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::StatsDamaged(_)), "{err}");
    }
}
